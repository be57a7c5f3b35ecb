"""``augmented``: ``lam~ = lam + eta_lam * C^``; each ascent step
``lam <- max(-eta_lam * C^, lam + eta_lam * C^)``, unclipped (docs/method.md §2a.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.constraints.base import Rule


def augmented_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array) -> jax.Array:
    """One augmented step ``lam <- max(-eta_lam * C^, lam + eta_lam * C^)``; ``(m,)`` -> ``(m,)``."""
    return jnp.maximum(-eta_lam * c_hat, lam + eta_lam * c_hat)


class Augmented(Rule):
    name = "augmented"
    suffix = "Augmented"

    def multiplier(self, dual, hp):
        return dual.lam + hp.eta_lam * dual.c_hat

    def step(self, lam, c_hat, hp):
        return augmented_step(lam, c_hat, hp.eta_lam)
