"""MDPO penalty schedules for ``alpha`` (docs/method.md §2d), in a registry.

Each schedule is one formula ``alpha_k(alpha_0, decay, k, K, k')`` registered by name
(``register``); its code is its position in the registry, and the tick (``TICKS``) is a
code too, so both may be traced: algorithm families (and the schedules study) vmap
members with different schedules in one program. Every schedule is a scalar formula, so
computing all of them and selecting the lane's costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax.plugin import check_choice


def _fixed(alpha0, decay, k, big_k, kp):
    return alpha0


def _linear(alpha0, decay, k, big_k, kp):
    return alpha0 / (1.0 - k / big_k)


def _restart(alpha0, decay, k, big_k, kp):
    return alpha0 / (1.0 - (k - kp) / (big_k - kp))


def _geometric(alpha0, decay, k, big_k, kp):
    return alpha0 * decay**k


# name -> formula (``alpha_0``, ``decay``, tick ``k``, total ticks ``K``, last restart ``k'``):
# fixed ``alpha_0``; linear ``alpha_0 / (1 - k / K)``; restart ``alpha_0 / (1 - (k - k') / (K - k'))``;
# geometric ``alpha_0 * decay^k`` (i.e. ``alpha_k = alpha_{k-1} * decay``).
_SCHEDULES: dict[str, Callable] = {"fixed": _fixed, "linear": _linear, "restart": _restart, "geometric": _geometric}
SCHEDULE_NAMES = tuple(_SCHEDULES)  # the built-in schedules (``config.AlphaSchedule``)
TICKS = ("epoch", "batch")  # when a schedule ticks (``config.AlphaTick``); its code is its position


def register(name: str, formula: Callable) -> None:
    """Add schedule ``name``: ``formula(alpha0, decay, k, K, k')`` of float32 scalars."""
    if not name or name in _SCHEDULES:
        raise ValueError(f"alpha schedule {name!r} is empty or registered already")
    _SCHEDULES[name] = formula


def names() -> tuple[str, ...]:
    """Every registered schedule's name, in code order."""
    return tuple(_SCHEDULES)


def items() -> tuple[tuple[str, Callable], ...]:
    """Every ``(name, formula)``, in code order (the public read of the registry)."""
    return tuple(_SCHEDULES.items())


def code(name: str) -> int:
    """The code of schedule ``name``: its position in the registry."""
    check_choice("alpha_schedule", name, tuple(_SCHEDULES))
    return names().index(name)


@struct.dataclass
class ScheduleState:
    tick: jax.Array  # k: ticks so far
    restart_tick: jax.Array  # k': tick of the last restart (0 if none)


@struct.dataclass
class Schedule:
    """Which schedule, ticking when: codes (``code``, positions in ``TICKS``; may be traced),
    and the run's iterations, from which ``K`` is counted (an argument of the program, not a
    constant of it, so that every budget runs one program)."""

    kind: jax.Array
    tick: jax.Array
    iterations: jax.Array  # the run's iterations (``Config.num_iterations``), int32

    @classmethod
    def of(cls, kind: str, tick: str, iterations: int = 1) -> Schedule:
        check_choice("alpha_tick", tick, TICKS)
        return cls(jnp.int32(code(kind)), jnp.int32(TICKS.index(tick)), jnp.int32(iterations))

    def per_epoch(self) -> jax.Array:
        """1 when the schedule ticks after every epoch, else 0 (int32)."""
        return (self.tick == TICKS.index("epoch")).astype(jnp.int32)


def init_schedule() -> ScheduleState:
    return ScheduleState(tick=jnp.zeros((), jnp.int32), restart_tick=jnp.zeros((), jnp.int32))


def alpha_ticks_total(schedule: Schedule, epochs: int) -> jax.Array:
    """``K``: ``iterations * epochs`` ticks per epoch, ``iterations`` per batch (int32)."""
    n = schedule.iterations
    return jnp.where(schedule.per_epoch() == 1, n * epochs, n)


def alpha_value(kind: jax.Array, state: ScheduleState, alpha0: jax.Array, decay: jax.Array, total_ticks) -> jax.Array:
    """``alpha_k`` of the schedule of code ``kind`` (``code``; may be traced): every registered
    formula at tick ``k = state.tick`` of ``K = total_ticks``, the lane's selected."""
    k = state.tick.astype(jnp.float32)
    big_k = jnp.asarray(total_ticks, jnp.float32)
    kp = state.restart_tick.astype(jnp.float32)
    alpha0 = jnp.asarray(alpha0, jnp.float32)
    return jnp.stack([f(alpha0, decay, k, big_k, kp) for f in _SCHEDULES.values()])[kind]


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


def after_iteration(state: ScheduleState, old_xi: jax.Array, env_params, schedule: Schedule) -> ScheduleState:
    """The schedule's state after an iteration whose robust method moved the kernel from
    ``old_xi`` to ``env_params.xi``: re-based when it moved far (``restart_trigger``; only
    the restart schedule reads it), then one tick when ``schedule`` ticks per batch (the
    learner ticks per epoch)."""
    state = maybe_restart(state, restart_trigger(old_xi, env_params.xi, env_params.kappa))
    return advance(state, 1 - schedule.per_epoch())
