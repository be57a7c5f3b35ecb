"""Algorithm families: several algorithms of the grid in one compiled, vmapped program.

Algorithms whose configs differ only in the constraint mode, robustness, alpha
schedule, name and numeric hyperparameters (e.g. MDPO, MDPO-Lag, MDPO-Augmented-Lag, MDPO-Robust,
MDPO-Robust-Lag, MDPO-Robust-Augmented-Lag) run the same program shapes. A family
compiles that program once, with the mode and the robust flag as per-member arrays,
and ``jax.vmap`` runs members x seeds together: 14 algorithms become 3 compiles, and
one wide batch runs faster than several narrow ones.

Member ``i`` of a family trained with key ``k`` gives the numbers of
``make_train(configs[i])(k)`` up to float rounding (the paths a member does not
use are computed and discarded; their random keys are drawn either way).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rcmdp_jax.config import Config, HParams
from rcmdp_jax.lagrange import MODE_CODES
from rcmdp_jax.schedules import SCHEDULE_CODES, TICK_CODES, Schedule
from rcmdp_jax.train import TrainResult, Variant, make_train, resolve_hparams


def family_key(cfg: Config) -> Config:
    """The part of ``cfg`` a family shares: everything but name, constraint mode,
    robustness, the alpha schedule and the numeric hyperparameters."""
    return dataclasses.replace(
        cfg, name="", constraint="none", robust=False, alpha_schedule="fixed", alpha_tick="epoch", hparams=HParams()
    )


def group(configs: dict[str, Config]) -> list[list[str]]:
    """Partition algorithm names into families, keeping the given order."""
    groups: dict[Config, list[str]] = {}
    for name, cfg in configs.items():
        groups.setdefault(family_key(cfg), []).append(name)
    return list(groups.values())


def make_family(configs: list[Config]):
    """One train function for ``configs`` (one family).

    Returns ``train(rng, member) -> TrainResult`` with ``member`` an integer index
    into ``configs`` (vmap over ``rng`` and ``member`` together), plus
    ``train.init(rng, member)`` and ``train.run(state, member, start, n)`` for chunked
    runs, like ``make_train``.
    """
    configs = [c.validate() for c in configs]
    if not configs:
        raise ValueError("make_family needs at least one config")
    keys = {family_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(
            "configs of one family may differ only in name, constraint, robust, alpha_schedule, alpha_tick "
            "and hparams; "
            f"got {len(keys)} different structures (use rcmdp_jax.family.group)"
        )
    base = make_train(dataclasses.replace(configs[0], constraint="augmented", robust=True))
    codes = jnp.array([MODE_CODES[c.constraint] for c in configs], jnp.int32)
    robust = jnp.array([c.robust for c in configs])
    schedule = Schedule(
        kind=jnp.array([SCHEDULE_CODES[c.alpha_schedule] for c in configs], jnp.int32),
        tick=jnp.array([TICK_CODES[c.alpha_tick] for c in configs], jnp.int32),
    )
    hps = jax.tree.map(lambda *xs: jnp.stack(xs), *[resolve_hparams(c, None) for c in configs])

    def member_args(member):
        hp = jax.tree.map(lambda x: x[member], hps)
        sched = jax.tree.map(lambda x: x[member], schedule)
        return hp, Variant(constraint=codes[member], robust=robust[member], schedule=sched)

    def init(rng, member):
        hp, _ = member_args(member)
        return base.init(rng, hp)

    def run(state, member, start=0, n: int = base.config.num_iterations):
        hp, variant = member_args(member)
        return base.run(state, hp, start, n, variant=variant)

    def train(rng, member) -> TrainResult:
        state, metrics = run(init(rng, member), member)
        return TrainResult(state=state, metrics=metrics)

    train.init = init  # type: ignore[attr-defined]
    train.run = run  # type: ignore[attr-defined]
    train.configs = configs  # type: ignore[attr-defined]
    train.env = base.env  # type: ignore[attr-defined]
    return train
