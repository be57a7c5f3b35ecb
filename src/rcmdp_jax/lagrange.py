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


# Integer codes of the constraint modes: the mode is a (traced) array in the train step,
# so algorithms with different modes share one vmapped program (``rcmdp_jax.family``).
MODE_CODES = {"none": 0, "lagrangian": 1, "augmented": 2}


def mode_code(mode) -> jax.Array:
    """The ``MODE_CODES`` code of ``mode``: a name, or a code already (may be traced)."""
    return jnp.int32(MODE_CODES[mode]) if isinstance(mode, str) else jnp.asarray(mode, jnp.int32)


def effective_multiplier(mode, dual: DualState, eta_lam: jax.Array) -> jax.Array:
    """``lam~``: ``0`` (none), ``lam`` (lagrangian), ``lam + eta_lam * C^`` (augmented).
    ``mode``: a name or a ``MODE_CODES`` code (may be traced: ``lax.switch``)."""
    branches = [
        lambda: jnp.zeros_like(dual.lam),
        lambda: dual.lam,
        lambda: dual.lam + eta_lam * dual.c_hat,
    ]
    return jax.lax.switch(mode_code(mode), branches)


def lagrangian_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array, lam_clip: jax.Array) -> jax.Array:
    """One ascent step ``lam <- clip(lam + eta_lam * C^, 0, lam_clip)``."""
    return jnp.clip(lam + eta_lam * c_hat, 0.0, lam_clip)


def augmented_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array) -> jax.Array:
    """One augmented step ``lam <- max(-eta_lam * C^, lam + eta_lam * C^)`` (no clipping)."""
    return jnp.maximum(-eta_lam * c_hat, lam + eta_lam * c_hat)


def ascent(step, lam: jax.Array, n_steps) -> jax.Array:
    """``n_steps`` applications of ``step`` to ``lam`` (``n_steps`` may be traced)."""
    return jax.lax.fori_loop(0, n_steps, lambda _, x: step(x), lam)


def dual_step(mode, dual: DualState, c_hat: jax.Array, hp, n_steps) -> DualState:
    """The dual phase of one iteration (SPEC §2a.4): ``n_steps`` (``K = dual_epochs x
    ceil(dual_batch / dual_minibatch)``) ascent steps of the mode's rule with the fresh
    estimate ``c_hat``, which is stored for the next ``lam~``. Mode "none" leaves the
    state as it is. ``mode``: a name or a (traced) code; ``n_steps`` may be traced."""
    branches = [
        lambda: dual,
        lambda: DualState(
            ascent(lambda x: lagrangian_step(x, c_hat, hp.eta_lam, hp.lam_clip), dual.lam, n_steps), c_hat
        ),
        lambda: DualState(ascent(lambda x: augmented_step(x, c_hat, hp.eta_lam), dual.lam, n_steps), c_hat),
    ]
    return jax.lax.switch(mode_code(mode), branches)
