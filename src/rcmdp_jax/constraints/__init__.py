"""Constraint rules: how an algorithm turns its constraint estimates into the multiplier
``lam~`` (docs/method.md §2a.4). One file per rule, each a ``Rule`` (``base.py``), registered
here by name:

* ``none``: unconstrained, ``lam~ = 0``;
* ``lagrangian``: ``lam~ = lam``, projected ascent on ``lam``;
* ``augmented``: ``lam~ = lam + eta_lam * C^``, the augmented step;
* ``pid``: the PID Lagrangian, once per iteration on the batch's ``C^``.

Every rule reads the one reading of the dual phase (``dual.reading``): ``C^`` and the per-step
estimates, the margin in both, each constraint's values discounted by its own ``gamma_c``.

A rule is chosen per lane of a family program: its code (``code``, the position in the
registry) is a traced array (``step.Variant.constraint``) and ``switch`` runs the lane's
rule, its branches taken from the registry. ``register(name, cls)`` adds a rule (a plug-in,
``rcmdp_jax.plugin``); the ``Config.constraint`` choices are the registry's names.
"""

from __future__ import annotations

import functools

import jax

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


def switch(which: jax.Array, fn, *args, cfg=None):
    """``fn(rule, *args)`` of the rule whose code is ``which`` (may be traced: ``lax.switch``
    over every registered rule, each reading its options from ``cfg``)."""
    return jax.lax.switch(which, [functools.partial(fn, r) for r in rules(cfg)], *args)


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


def has_dual(which: jax.Array) -> jax.Array:
    """Whether the rule of code ``which`` (may be traced) runs a dual phase."""
    import jax.numpy as jnp

    return jnp.asarray([REGISTRY.get(n, "constraint").dual for n in names()])[which]


__all__ = [
    "CONSTRAINT_NAMES", "PID", "REGISTRY", "DualState", "Rule", "ascent", "code", "get", "has_dual", "items",
    "init_dual", "keeps_state", "lagrangian_cost", "lagrangian_reward",
    "multiplier", "names", "register", "rules", "switch", "unregister", "update",
]  # fmt: skip
