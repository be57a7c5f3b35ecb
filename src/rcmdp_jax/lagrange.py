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


# Integer codes of the constraint modes, for algorithm families vmapped in one program
# (``rcmdp_jax.family``), where the mode is a traced array rather than a Python string.
MODE_CODES = {"none": 0, "lagrangian": 1, "augmented": 2}


def effective_multiplier(mode, dual: DualState, eta_lam: jax.Array) -> jax.Array:
    """``lam~``: ``0`` (none), ``lam`` (lagrangian), ``lam + eta_lam * C^`` (augmented).

    ``mode`` is a name, or an integer code of ``MODE_CODES`` (may be traced)."""
    candidates = {
        "none": lambda: jnp.zeros_like(dual.lam),
        "lagrangian": lambda: dual.lam,
        "augmented": lambda: dual.lam + eta_lam * dual.c_hat,
    }
    return _by_mode(mode, candidates)


def _by_mode(mode, candidates: dict):
    """``candidates[mode]()`` for a mode name; for a (traced) ``MODE_CODES`` code, every
    candidate is computed and the matching one selected elementwise."""
    if isinstance(mode, str):
        return candidates[mode]()
    out = candidates["none"]()
    for name in ("lagrangian", "augmented"):
        out = jax.tree.map(lambda a, b, c=MODE_CODES[name]: jnp.where(mode == c, a, b), candidates[name](), out)
    return out


def lagrangian_update(
    lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array, dual_epochs: int, lam_clip: jax.Array
) -> jax.Array:
    """``lam <- clip(lam + dual_epochs * eta_lam * C^, 0, lam_clip)``."""
    return jnp.clip(lam + dual_epochs * eta_lam * c_hat, 0.0, lam_clip)


def augmented_update(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array) -> jax.Array:
    """``lam <- max(-eta_lam * C^, lam + eta_lam * C^)`` (no clipping)."""
    return jnp.maximum(-eta_lam * c_hat, lam + eta_lam * c_hat)


def dual_step(mode, dual: DualState, c_hat: jax.Array, hp, dual_epochs: int) -> DualState:
    """Apply the mode's update with the fresh estimate ``c_hat``; store it for ``lam~``.
    Mode "none" leaves the state as it is. ``mode``: a name or a (traced) code."""
    candidates = {
        "none": lambda: dual,
        "lagrangian": lambda: DualState(lagrangian_update(dual.lam, c_hat, hp.eta_lam, dual_epochs, hp.lam_clip), c_hat),
        "augmented": lambda: DualState(augmented_update(dual.lam, c_hat, hp.eta_lam), c_hat),
    }
    return _by_mode(mode, candidates)
