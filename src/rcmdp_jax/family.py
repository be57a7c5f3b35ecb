"""Algorithm families: several algorithms of the grid in one compiled, vmapped program.

Algorithms whose configs differ only in the constraint rule, robustness, alpha
schedule, name and numeric hyperparameters (e.g. MDPO, MDPO-Lag, MDPO-Augmented-Lag, MDPO-Robust,
MDPO-Robust-Lag, MDPO-Robust-Augmented-Lag) run the same program (``step.Step``: the
rule, the robust method and the schedule are traced arrays there). A family stacks
its members' arrays and hyperparameters, and ``jax.vmap`` runs members x seeds
together: 14 algorithms become 3 compiles, and one wide batch runs faster than
several narrow ones.

``make_family`` holds the members' numbers as constants (``jax.jit(jax.vmap(family))``); the
study's runner (``rcmdp_jax.chunked``) passes them, with the budget, as arguments instead
(``tables``, ``Family.using``) and keys its compiled program on ``structure``: a run whose only
change is a number or the budget runs the program compiled before.

Member ``i`` of a family trained with key ``k`` gives the numbers of
``make_train(configs[i])(k)`` up to float rounding (the paths a member does not
use are computed and discarded; their random keys are drawn either way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import adversary, constraints, learners, options, schedules
from rcmdp_jax.config import MEMBER_FIELDS, Config, fields_of
from rcmdp_jax.envs.numbers import program_key
from rcmdp_jax.hparams import HParams, built_for
from rcmdp_jax.plugin import options_of
from rcmdp_jax.step import Step, Variant
from rcmdp_jax.train import Program, resolve_hparams

_DEFAULT = Config()


def family_key(cfg: Config) -> Config:
    """The part of ``cfg`` a family shares: every field but those its members may differ in
    (``config.MEMBER_FIELDS``: the choices, numbers and name), these at their defaults (the numbers
    at a value the program is built for kept: ``hparams.BUILT_FOR``)."""
    shared = dataclasses.replace(cfg, **{f: getattr(_DEFAULT, f) for f in MEMBER_FIELDS})
    return dataclasses.replace(shared, hparams=built_for(cfg.hparams))


def structure(configs) -> tuple:
    """What the program of a family of ``configs`` is built from, and so the key of its compiled
    program: the shared config without its budget (``total_timesteps``), its environment's numbers
    (``envs.numbers.program_key``) and the options no plug-in of it reads, the robust methods and constraint rules it switches over, and its number of
    members. The members' hyperparameters,
    ``Variant``s and budget (``tables``, the run's iterations) are arguments of the program: a
    run whose only change is a learning rate, a budget or a limit runs the compiled program again."""
    configs = tuple(configs)
    read = {o for c in configs for cls in options.used(c) for o in options_of(cls)}  # the options its plug-ins read
    shared = dataclasses.replace(family_key(configs[0]), **{f: getattr(_DEFAULT, f) for f in fields_of("budget")})
    shared = dataclasses.replace(shared, env=program_key(shared.env))  # its numbers: arguments (``envs.numbers``)
    shared = dataclasses.replace(shared, options=tuple(p for p in shared.options if p[0] in read))
    return shared, adversary.family_methods(configs), rules_of(configs), len(configs)


def plugins(configs) -> tuple:
    """The plug-ins a family's program is built from, themselves, ``(name, object)`` pairs by kind: its
    learner, the constraint rules and robust methods its lanes train, and every alpha schedule (the
    program switches over the registry's). One registered but not used is no part of the program:
    a ``--plugins`` file changes only the programs that use it (the study's key of a compiled program)."""
    configs = tuple(configs)
    return (((configs[0].learner, learners.get(configs[0].learner)),),
            tuple((n, constraints.REGISTRY.get(n, "constraint")) for n in rules_of(configs)),
            tuple((m, adversary.method_class(m)) for m in adversary.family_methods(configs)),
            schedules.items())  # fmt: skip


def tables(configs, methods: tuple[str, ...] | None = None) -> tuple[HParams, Variant]:
    """Every member's hyperparameters and ``Variant``, stacked (leading axis: the members) as
    NumPy arrays: the arguments a family's program takes (``Family.using``)."""
    configs = tuple(configs)
    methods = adversary.family_methods(configs) if methods is None else methods
    rules = rules_of(configs)
    numbers = frozenset().union(*map(options.numbers_read, configs))  # the numbers of the plug-ins it runs
    stack = lambda trees: jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)
    return (stack([resolve_hparams(c, None, numbers) for c in configs]),
            stack([Variant.of(c, methods, rules) for c in configs]))  # fmt: skip


def rules_of(configs) -> tuple[str, ...]:
    """The constraint rules a family of ``configs`` switches over: its members', in order."""
    return tuple(dict.fromkeys(c.constraint for c in configs))


def group(configs: dict[str, Config]) -> list[list[str]]:
    """Partition algorithm names into families, keeping the given order."""
    groups: dict[Config, list[str]] = {}
    for name, cfg in configs.items():
        groups.setdefault(family_key(cfg), []).append(name)
    return list(groups.values())


@dataclasses.dataclass(frozen=True, eq=False)
class Family(Program):
    """Several algorithms in one program: ``family(rng, member)`` trains member
    ``member`` (an index into ``configs``; vmap ``rng`` and ``member`` together).
    ``init(rng, member)`` and ``run(state, member, start, n)`` split it for chunked
    runs, as for one algorithm (``train.Program``)."""

    configs: tuple[Config, ...]
    env: Any
    step: Step
    hparams: HParams  # every member's, stacked
    variants: Variant  # every member's, stacked

    def inputs(self, member) -> tuple[HParams, Variant]:
        """Member ``member``'s hyperparameters and ``Variant``."""
        if not isinstance(member, jax.core.Tracer):  # concrete indices are checked here
            idx = np.asarray(member)
            if member is None or (idx.size and (idx.min() < 0 or idx.max() >= len(self.configs))):
                got = None if member is None else idx.tolist()
                raise ValueError(f"member must index the family's {len(self.configs)} config(s) (0 .. "
                                 f"{len(self.configs) - 1}), got {got}")  # fmt: skip
        # traced (under vmap): an index outside the family would be clamped to a member; NaN
        # hyperparameters instead flag its lane (``valid_input`` 0, left out as diverged)
        hp = jax.tree.map(lambda x: jnp.take(x, member, axis=0, mode="fill", fill_value=jnp.nan), self.hparams)
        return hp, jax.tree.map(lambda x: x[member], self.variants)

    def using(self, hparams: HParams, variants: Variant) -> Family:
        """This family reading its members' hyperparameters and ``Variant``s from ``hparams`` and
        ``variants`` (``tables``' layout; traced: arguments of the program, not constants)."""
        return dataclasses.replace(self, hparams=hparams, variants=variants)


def make_family(configs: list[Config]) -> Family:
    """One ``Family`` for ``configs`` (configs that ``family_key`` maps to one key)."""
    if not isinstance(configs, Config) and hasattr(configs, "__iter__"):
        configs = tuple(configs)  # a generator is read once
    if not isinstance(configs, (Config, tuple)):
        configs = (configs,)
    if isinstance(configs, Config) or not all(isinstance(c, Config) for c in configs):
        got = type(configs).__name__ if isinstance(configs, Config) else [type(c).__name__ for c in configs]
        got = got[0] if isinstance(got, list) and len(got) == 1 else got
        raise TypeError(f"make_family needs a list of rcmdp_jax.Config (e.g. [preset('cartpole', 'PPO'), "
                        f"preset('cartpole', 'PPO-Lag')]), got {got}")  # fmt: skip
    configs = tuple(c.validate() for c in configs)
    if not configs:
        raise ValueError("make_family needs at least one config")
    keys = {family_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(
            f"configs of one family may differ only in {', '.join(MEMBER_FIELDS)}; "
            f"got {len(keys)} different structures (use rcmdp_jax.family.group)"
        )
    methods = adversary.family_methods(configs)
    step = Step(configs[0], methods, rules_of(configs))
    hparams, variants = jax.tree.map(jnp.asarray, tables(configs, methods))
    return Family(configs=configs, env=step.env, step=step, hparams=hparams, variants=variants)
