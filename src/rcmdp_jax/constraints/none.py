"""``none``: an unconstrained algorithm. ``lam~ = 0``; the dual state is left as it is."""

from __future__ import annotations

import jax.numpy as jnp

from rcmdp_jax.constraints.base import Rule


class NoConstraint(Rule):
    name = "none"
    dual = False

    def multiplier(self, dual, hp):
        return jnp.zeros_like(dual.lam)

    def update(self, dual, c_hat, hp, n_steps, estimates=None):
        return dual
