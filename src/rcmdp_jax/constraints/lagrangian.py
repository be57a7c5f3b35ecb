"""``lagrangian``: ``lam~ = lam``; each ascent step ``lam <- clip(lam + eta_lam * C^, 0, lam_clip)``
(docs/method.md §2a.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.constraints.base import Rule


def lagrangian_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array, lam_clip: jax.Array) -> jax.Array:
    """One ascent step ``lam <- clip(lam + eta_lam * C^, 0, lam_clip)``; ``(m,)`` -> ``(m,)``."""
    return jnp.clip(lam + eta_lam * c_hat, 0.0, lam_clip)


class Lagrangian(Rule):
    name = "lagrangian"
    suffix = ""

    def step(self, lam, c_hat, hp):
        return lagrangian_step(lam, c_hat, hp.eta_lam, hp.lam_clip)
