"""Robust training methods: how a robust algorithm chooses the kernels it trains on.

One file per method, each an ``Adversary`` (``base.py``) registered here by name. A
method is chosen per lane of a family program (``train.Variant.adversary`` indexes the
family's methods), like the constraint rule, so several methods train in one program.

* ``ltma``: the study's Lagrangian transition mirror ascent (score function, raw step ``eta_xi``);
* ``ltma-norm``: LTMA with the pathwise gradient and a scale-free step (each step moves ``xi``
  by ``xi_step`` of the box's half-width per coordinate, along the gradient's sign);
* ``dr``: domain randomisation, a kernel drawn uniformly from the box for every training episode;
* ``worst-of-n``: ``adversary_candidates`` kernels drawn from the box, the policy run on each,
  training on the worst ``adversary_fraction`` of them by the Lagrangian value (EPOpt's idea);
* ``corners``: the policy run on the box's ``2^n`` corners, training on the worst one.

A non-robust algorithm has no adversary (``"none"`` in a family's method list). A method of
your own is one file with an ``Adversary`` subclass and one call, ``register(name, cls)``;
then ``ALGO+name`` and ``Config(adversary=name)`` choose it (docs/design.md).
"""

from __future__ import annotations

from importlib import import_module

ADVERSARY_NAMES = ("ltma", "ltma-norm", "dr", "worst-of-n", "corners")  # the built-in methods
NONE = "none"

# name -> the Adversary class, or "module:class" for a built-in one (imported when first used)
_METHODS: dict = {
    "ltma": "rcmdp_jax.adversary.ltma:StudyLTMA",
    "ltma-norm": "rcmdp_jax.adversary.ltma_norm:NormalisedLTMA",
    "dr": "rcmdp_jax.adversary.randomise:DomainRandomisation",
    "worst-of-n": "rcmdp_jax.adversary.worst_of_n:WorstOfN",
    "corners": "rcmdp_jax.adversary.corners:Corners",
    NONE: "rcmdp_jax.adversary.base:Nominal",
}


def register(name: str, cls) -> type:
    """Add robust method ``name`` (a new name of letters, digits, ``-``, ``_`` and ``.``;
    ``cls`` an ``Adversary`` subclass made without arguments); returns ``cls``. Its ``step``
    must keep the kernels in the box (``env.project``, as the built-in methods do)."""
    import re

    from rcmdp_jax.adversary.base import Adversary

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ValueError(f"a robust method's name must be letters, digits, '-', '_' and '.' (it goes in ALGO+METHOD "
                         f"names, --algos lists and folder names), got {name!r}")  # fmt: skip
    if name in _METHODS:
        what = "the name of no method (a non-robust algorithm)" if name == NONE else "registered already"
        raise ValueError(f"robust method {name!r} is {what}")
    if not (isinstance(cls, type) and issubclass(cls, Adversary)):
        raise ValueError(f"a robust method must be an rcmdp_jax.adversary.base.Adversary subclass, got {cls!r}")
    if cls.step is Adversary.step:  # else the nominal kernel throughout, trained as if robust
        raise ValueError(f"robust method {name!r}: {cls.__name__} does not define step(self, ctx, key, params, "
                         "env_xi, actor_params, lam_tilde, hp) -> (params, env_xi, steps spent); a robust method "
                         "moves the kernels there")  # fmt: skip
    try:
        cls()
    except TypeError as err:
        raise ValueError(f"robust method {name!r}: {cls.__name__}() must take no arguments ({err})") from None
    _METHODS[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove plug-in method ``name`` (the built-in methods stay)."""
    if name in (NONE, *ADVERSARY_NAMES):
        raise ValueError(f"{name!r} is a built-in robust method")
    if name not in _METHODS:
        plugins = [m for m in names() if m not in ADVERSARY_NAMES]
        raise ValueError(f"no robust method {name!r} is registered; registered: {', '.join(plugins) or 'none'}")
    del _METHODS[name]


def names() -> tuple[str, ...]:
    """The robust methods a config may name: the built-in ones, then the registered ones."""
    return tuple(m for m in _METHODS if m != NONE)


def get(name: str):
    """An instance of the ``Adversary`` registered as ``name`` (``"none"`` or one of ``names()``)."""
    if name not in _METHODS:
        raise ValueError(f"unknown robust method {name!r}; choose one of: {', '.join((NONE, *names()))}")
    cls = _METHODS[name]
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = getattr(import_module(module), attr)
    method = cls()
    method.name = name  # the program skips the lanes of a method named "none"
    return method


def method_of(cfg) -> str:
    """The robust method a config trains with: its ``adversary`` when robust, else ``"none"``."""
    return cfg.adversary if cfg.robust else NONE


def family_methods(configs) -> tuple[str, ...]:
    """The methods a family's configs use, in registry order (a family's static list)."""
    used = {method_of(c) for c in configs}
    return tuple(m for m in (NONE, *names()) if m in used)


__all__ = ["ADVERSARY_NAMES", "NONE", "family_methods", "get", "method_of", "names", "register", "unregister"]
