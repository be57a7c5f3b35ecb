"""Constraint handling: the multiplier the learners see, and the dual updates (SPEC §2a.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class DualState:
    lam: jax.Array  # (m,) Lagrange multipliers
    c_hat: jax.Array  # (m,) last Monte-Carlo estimate of the discounted constraint values


def init_dual(m: int, lam_init: jax.Array) -> DualState:
    return DualState(lam=jnp.full((m,), lam_init, jnp.float32), c_hat=jnp.zeros((m,), jnp.float32))


def effective_multiplier(mode: str, dual: DualState, eta_lam: jax.Array) -> jax.Array:
    """``lam~``: ``0`` (none), ``lam`` (lagrangian), ``lam + eta_lam * C^`` (augmented)."""
    if mode == "none":
        return jnp.zeros_like(dual.lam)
    if mode == "lagrangian":
        return dual.lam
    return dual.lam + eta_lam * dual.c_hat


def lagrangian_update(
    lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array, dual_epochs: int, lam_clip: jax.Array
) -> jax.Array:
    """``lam <- clip(lam + dual_epochs * eta_lam * C^, 0, lam_clip)``."""
    return jnp.clip(lam + dual_epochs * eta_lam * c_hat, 0.0, lam_clip)


def augmented_update(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array) -> jax.Array:
    """``lam <- max(-eta_lam * C^, lam + eta_lam * C^)`` (no clipping)."""
    return jnp.maximum(-eta_lam * c_hat, lam + eta_lam * c_hat)


def dual_step(mode: str, dual: DualState, c_hat: jax.Array, hp, dual_epochs: int) -> DualState:
    """Apply the mode's update with the fresh estimate ``c_hat``; store it for ``lam~``."""
    if mode == "lagrangian":
        lam = lagrangian_update(dual.lam, c_hat, hp.eta_lam, dual_epochs, hp.lam_clip)
    elif mode == "augmented":
        lam = augmented_update(dual.lam, c_hat, hp.eta_lam)
    else:
        lam = dual.lam
    return DualState(lam=lam, c_hat=c_hat)
