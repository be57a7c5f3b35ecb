"""MDPO penalty schedules for ``alpha`` (SPEC §2d)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ScheduleState:
    tick: jax.Array  # k: ticks so far
    restart_tick: jax.Array  # k': tick of the last restart (0 if none)


def init_schedule() -> ScheduleState:
    return ScheduleState(tick=jnp.zeros((), jnp.int32), restart_tick=jnp.zeros((), jnp.int32))


def alpha_value(
    kind: str, state: ScheduleState, alpha0: jax.Array, decay: jax.Array, total_ticks: int
) -> jax.Array:
    """``alpha_k`` for schedule ``kind``:

    * fixed: ``alpha_0``
    * linear: ``alpha_0 / (1 - k / K)``
    * restart: ``alpha_0 / (1 - (k - k') / (K - k'))``
    * geometric: ``alpha_0 * decay^k`` (i.e. ``alpha_k = alpha_{k-1} * decay``)
    """
    k = state.tick.astype(jnp.float32)
    big_k = jnp.float32(total_ticks)
    if kind == "fixed":
        return jnp.asarray(alpha0, jnp.float32)
    if kind == "linear":
        return alpha0 / (1.0 - k / big_k)
    if kind == "restart":
        kp = state.restart_tick.astype(jnp.float32)
        return alpha0 / (1.0 - (k - kp) / (big_k - kp))
    if kind == "geometric":
        return alpha0 * decay**k
    raise ValueError(f"alpha_schedule={kind!r}; choose fixed, linear, restart or geometric")


def advance(state: ScheduleState) -> ScheduleState:
    return state.replace(tick=state.tick + 1)


def maybe_restart(state: ScheduleState, restart: jax.Array) -> ScheduleState:
    """Re-base ``k, K`` to ``k - k', K - k'`` when ``restart`` (LTMA moved ``xi`` far)."""
    return state.replace(restart_tick=jnp.where(restart, state.tick, state.restart_tick))
