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

A non-robust algorithm has no adversary (``"none"`` in a family's method list).
"""

from __future__ import annotations

ADVERSARY_NAMES = ("ltma", "ltma-norm", "dr", "worst-of-n", "corners")
NONE = "none"

_MODULES = {
    "ltma": ("rcmdp_jax.adversary.ltma", "StudyLTMA"),
    "ltma-norm": ("rcmdp_jax.adversary.ltma_norm", "NormalisedLTMA"),
    "dr": ("rcmdp_jax.adversary.randomise", "DomainRandomisation"),
    "worst-of-n": ("rcmdp_jax.adversary.worst_of_n", "WorstOfN"),
    "corners": ("rcmdp_jax.adversary.corners", "Corners"),
    NONE: ("rcmdp_jax.adversary.base", "Nominal"),
}


def get(name: str):
    """The ``Adversary`` registered as ``name`` (``"none"`` or one of ``ADVERSARY_NAMES``)."""
    from importlib import import_module

    if name not in _MODULES:
        raise ValueError(f"unknown robust method {name!r}; choose one of: {', '.join((NONE, *ADVERSARY_NAMES))}")
    module, cls = _MODULES[name]
    return getattr(import_module(module), cls)()


def method_of(cfg) -> str:
    """The robust method a config trains with: its ``adversary`` when robust, else ``"none"``."""
    return cfg.adversary if cfg.robust else NONE


def family_methods(configs) -> tuple[str, ...]:
    """The methods a family's configs use, in registry order (a family's static list)."""
    used = {method_of(c) for c in configs}
    return tuple(m for m in (NONE, *ADVERSARY_NAMES) if m in used)


__all__ = ["ADVERSARY_NAMES", "NONE", "family_methods", "get", "method_of"]
