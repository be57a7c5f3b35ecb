"""Constraint rules: how an algorithm turns its constraint estimates into the multiplier
``lam~`` (docs/method.md §2a.4). One file per rule, each a ``Rule`` (``base.py``), registered
here by name:

* ``none``: unconstrained, ``lam~ = 0``;
* ``lagrangian``: ``lam~ = lam``, projected ascent on ``lam``;
* ``augmented``: ``lam~ = lam + eta_lam * C^``, the augmented step.

A rule is chosen per lane of a family program: its code (``code``, the position in the
registry) is a traced array (``step.Variant.constraint``) and ``switch`` runs the lane's
rule, its branches taken from the registry. ``register`` adds a rule (a plug-in); the
``Config.constraint`` choices are the registry's names.
"""

from __future__ import annotations

import functools

import jax

from rcmdp_jax.constraints.augmented import Augmented
from rcmdp_jax.constraints.base import DualState, Rule, ascent, init_dual, lagrangian_reward
from rcmdp_jax.constraints.lagrangian import Lagrangian
from rcmdp_jax.constraints.none import NoConstraint

_RULES: dict[str, Rule] = {r.name: r for r in (NoConstraint(), Lagrangian(), Augmented())}
CONSTRAINT_NAMES = tuple(_RULES)  # the built-in rules (``config.Constraint``)


def register(rule: Rule) -> Rule:
    """Add ``rule`` (a ``Rule`` instance, its ``name`` new) to the registry; returns it."""
    if not isinstance(rule, Rule) or not rule.name:
        raise ValueError(f"a constraint rule must be a named rcmdp_jax.constraints.Rule, got {rule!r}")
    if rule.name in _RULES:
        raise ValueError(f"constraint rule {rule.name!r} is registered already")
    _RULES[rule.name] = rule
    return rule


def unregister(name: str) -> None:
    """Remove plug-in rule ``name`` (the built-in rules stay)."""
    if name in CONSTRAINT_NAMES:
        raise ValueError(f"constraint rule {name!r} is built in")
    _RULES.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered rule's name, in code order."""
    return tuple(_RULES)


def get(name: str) -> Rule:
    """The rule registered as ``name``."""
    if name not in _RULES:
        raise ValueError(f"constraint={name!r} is not allowed; choose one of: {', '.join(_RULES)}")
    return _RULES[name]


def code(name: str) -> int:
    """The code of rule ``name``: its position in the registry."""
    get(name)
    return names().index(name)


def switch(which: jax.Array, fn, *args):
    """``fn(rule, *args)`` of the rule whose code is ``which`` (may be traced: ``lax.switch``
    over every registered rule)."""
    return jax.lax.switch(which, [functools.partial(fn, r) for r in _RULES.values()], *args)


def multiplier(which: jax.Array, dual: DualState, hp) -> jax.Array:
    """``lam~`` of the rule whose code is ``which`` (may be traced)."""
    return switch(which, lambda rule, d: rule.multiplier(d, hp), dual)


def has_dual(which: jax.Array) -> jax.Array:
    """Whether the rule of code ``which`` (may be traced) runs a dual phase."""
    import jax.numpy as jnp

    return jnp.asarray([r.dual for r in _RULES.values()])[which]


__all__ = [
    "CONSTRAINT_NAMES", "DualState", "Rule", "ascent", "code", "get", "has_dual", "init_dual", "lagrangian_reward",
    "multiplier", "names", "register", "switch", "unregister",
]  # fmt: skip
