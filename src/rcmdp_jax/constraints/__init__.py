"""Constraint rules: how an algorithm turns its constraint estimates into the multiplier
``lam~`` (docs/method.md §2a.4). One file per rule, each a ``Rule`` (``base.py``), registered
here by name:

* ``none``: unconstrained, ``lam~ = 0``;
* ``lagrangian``: ``lam~ = lam``, projected ascent on ``lam``;
* ``augmented``: ``lam~ = lam + eta_lam * C^``, the augmented step;
* ``pid``: the PID Lagrangian, once per iteration on the batch's ``C^``.

Every rule reads the one reading of the dual phase (``dual.reading``): ``C^`` and the per-step
estimates, the margin in both, each constraint's values discounted by its own ``gamma_c``.

A rule is chosen per lane of a family program: its index among the program's rules (``Choice``)
is a traced array (``step.Variant.constraint``) and ``switch`` runs the lane's rule, its branches
the program's rules only (a rule registered but not trained is no part of the program). ``register(name, cls)`` adds a rule (a plug-in,
``rcmdp_jax.plugin``); the ``Config.constraint`` choices are the registry's names.
"""

from __future__ import annotations

import functools

import jax
from flax import struct

from rcmdp_jax.constraints.augmented import Augmented
from rcmdp_jax.constraints.base import DualState, Rule, ascent, init_dual, lagrangian_cost, lagrangian_reward
from rcmdp_jax.constraints.lagrangian import Lagrangian
from rcmdp_jax.constraints.none import NoConstraint
from rcmdp_jax.constraints.pid import PID
from rcmdp_jax.plugin import Registry

REGISTRY = Registry("constraint rule", "rcmdp_jax.constraints.base:Rule",
                    {"none": NoConstraint, "lagrangian": Lagrangian, "augmented": Augmented, "pid": PID})  # fmt: skip
CONSTRAINT_NAMES = REGISTRY.builtin  # the built-in rules (``config.Constraint``)
unregister, names, items = REGISTRY.unregister, REGISTRY.names, REGISTRY.items


def register(name: str, cls: type) -> type:
    """Add rule ``cls`` (a ``Rule`` subclass) as ``name``, in code order; returns it."""
    return REGISTRY.register(name, cls)


def get(name: str, cfg=None) -> Rule:
    """The rule registered as ``name``, reading its options from ``cfg`` (a ``Config``)."""
    rule = REGISTRY.get(name, "constraint")(cfg)
    rule.name = name
    return rule


def rules(cfg=None) -> tuple[Rule, ...]:
    """Every registered rule, in code order, reading its options from ``cfg``."""
    return tuple(get(n, cfg) for n in names())


def code(name: str) -> int:
    """The code of rule ``name``: its position in the registry."""
    get(name)
    return names().index(name)


@struct.dataclass
class Choice:
    """A lane's rule among the rules a program switches over (``names``, static: a family's
    members' rules, ``family.rules_of``): its ``index`` there, a traced array
    (``step.Variant.constraint``), so that a program holds only the rules its lanes train."""

    index: jax.Array
    names: tuple = struct.field(pytree_node=False, default=())

    @classmethod
    def of(cls, name: str, names: tuple[str, ...]) -> Choice:
        get(name)
        return cls(index=jax.numpy.int32(names.index(name)), names=tuple(names))


def _branches(which) -> tuple[jax.Array, tuple[str, ...]]:
    """``(index, rule names)`` of ``which``: a ``Choice``, or a code into the whole registry."""
    return (which.index, which.names) if isinstance(which, Choice) else (which, names())


def switch(which, fn, *args, cfg=None):
    """``fn(rule, *args)`` of the rule ``which`` chooses (a ``Choice``, or a code into the registry;
    may be traced: ``lax.switch`` over its rules, each reading its options from ``cfg``)."""
    index, among = _branches(which)
    return jax.lax.switch(index, [functools.partial(fn, get(n, cfg)) for n in among], *args)


def keeps_state(rule: Rule) -> bool:
    """Whether ``rule`` keeps a state of its own (``Rule.init_state`` overridden)."""
    return type(rule).init_state is not Rule.init_state


def _absent(rule: Rule, dual: DualState) -> bool:
    """A rule with a state of its own that this program does not train (no state in ``dual``):
    its ``lax.switch`` branch is never taken, and leaves the dual state as it is."""
    return keeps_state(rule) and rule.name not in dual.own


def multiplier(which: jax.Array, dual: DualState, hp, cfg=None) -> jax.Array:
    """``lam~`` of the rule whose code is ``which`` (may be traced)."""
    return switch(which, lambda rule, d: d.lam if _absent(rule, d) else rule.multiplier(d, hp), dual, cfg=cfg)


def update(which: jax.Array, dual: DualState, c_hat, hp, n_steps, estimates=None, cfg=None) -> DualState:
    """The dual phase's update of the rule whose code is ``which`` (may be traced): ``Rule.update``."""

    def one(rule, d):
        return d if _absent(rule, d) else rule.update(d, c_hat, hp, n_steps, estimates)

    return switch(which, one, dual, cfg=cfg)


def has_dual(which) -> jax.Array:
    """Whether the rule ``which`` chooses (``switch``'s; may be traced) runs a dual phase."""
    import jax.numpy as jnp

    index, among = _branches(which)
    return jnp.asarray([REGISTRY.get(n, "constraint").dual for n in among])[index]


__all__ = [
    "CONSTRAINT_NAMES", "PID", "REGISTRY", "Choice", "DualState", "Rule", "ascent", "code", "get", "has_dual", "items",
    "init_dual", "keeps_state", "lagrangian_cost", "lagrangian_reward",
    "multiplier", "names", "register", "rules", "switch", "unregister", "update",
]  # fmt: skip
