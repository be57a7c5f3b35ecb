"""MDPO penalty schedules for ``alpha`` (docs/method.md §2d).

The schedule and its tick are integer codes (``SCHEDULE_CODES``, ``TICK_CODES``), so
they may be traced: algorithm families (and the schedules study) vmap members with
different schedules in one program. Every candidate is a scalar formula, so computing
all of them and selecting one costs nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

SCHEDULE_CODES = {"fixed": 0, "linear": 1, "restart": 2, "geometric": 3}
TICK_CODES = {"epoch": 0, "batch": 1}


@struct.dataclass
class ScheduleState:
    tick: jax.Array  # k: ticks so far
    restart_tick: jax.Array  # k': tick of the last restart (0 if none)


@struct.dataclass
class Schedule:
    """Which schedule, ticking when: ``SCHEDULE_CODES`` / ``TICK_CODES`` values (may be traced)."""

    kind: jax.Array
    tick: jax.Array

    @classmethod
    def of(cls, kind: str, tick: str) -> Schedule:
        return cls(jnp.int32(SCHEDULE_CODES[kind]), jnp.int32(TICK_CODES[tick]))

    def per_epoch(self) -> jax.Array:
        """1 when the schedule ticks after every epoch, else 0 (int32)."""
        return (self.tick == TICK_CODES["epoch"]).astype(jnp.int32)


def init_schedule() -> ScheduleState:
    return ScheduleState(tick=jnp.zeros((), jnp.int32), restart_tick=jnp.zeros((), jnp.int32))


def alpha_ticks_total(schedule: Schedule, num_iterations: int, epochs: int) -> jax.Array:
    """``K``: ``num_iterations * epochs`` ticks per epoch, ``num_iterations`` per batch."""
    return jnp.where(schedule.per_epoch() == 1, num_iterations * epochs, num_iterations)


def alpha_value(kind, state: ScheduleState, alpha0: jax.Array, decay: jax.Array, total_ticks) -> jax.Array:
    """``alpha_k`` for schedule ``kind`` (a name or a ``SCHEDULE_CODES`` code, may be traced):

    * fixed: ``alpha_0``
    * linear: ``alpha_0 / (1 - k / K)``
    * restart: ``alpha_0 / (1 - (k - k') / (K - k'))``
    * geometric: ``alpha_0 * decay^k`` (i.e. ``alpha_k = alpha_{k-1} * decay``)
    """
    if isinstance(kind, str):
        if kind not in SCHEDULE_CODES:
            raise ValueError(f"alpha_schedule={kind!r}; choose fixed, linear, restart or geometric")
        kind = SCHEDULE_CODES[kind]
    k = state.tick.astype(jnp.float32)
    big_k = jnp.asarray(total_ticks, jnp.float32)
    kp = state.restart_tick.astype(jnp.float32)
    alpha0 = jnp.asarray(alpha0, jnp.float32)
    candidates = jnp.stack([
        alpha0,
        alpha0 / (1.0 - k / big_k),
        alpha0 / (1.0 - (k - kp) / (big_k - kp)),
        alpha0 * decay**k,
    ])  # fmt: skip
    return candidates[kind]


def advance(state: ScheduleState, by=1) -> ScheduleState:
    return state.replace(tick=state.tick + by)


def restart_trigger(old_xi: jax.Array, new_xi: jax.Array, kappa: jax.Array) -> jax.Array:
    """docs/method.md §2d's restart condition: the adversary moved some ``xi`` coordinate by more
    than half its box half-width ``kappa`` in one LTMA phase."""
    return jnp.any(jnp.abs(new_xi - old_xi) > 0.5 * kappa)


def maybe_restart(state: ScheduleState, restart: jax.Array) -> ScheduleState:
    """Re-base ``k, K`` to ``k - k', K - k'`` when ``restart`` (LTMA moved ``xi`` far).
    Only the ``restart`` schedule reads ``k'``."""
    return state.replace(restart_tick=jnp.where(restart, state.tick, state.restart_tick))
