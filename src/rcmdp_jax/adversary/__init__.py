"""Robust training methods: how a robust algorithm chooses the kernels it trains on.

One file per method, each an ``Adversary`` (``base.py``) registered here by name. A
method is chosen per lane of a family program (``step.Variant.adversary`` indexes the
family's methods), like the constraint rule, so several methods train in one program.

* ``ltma``: the study's Lagrangian transition mirror ascent (score function, raw step ``eta_xi``);
* ``ltma-norm``: LTMA with the pathwise gradient and a scale-free step (each step moves ``xi``
  by ``xi_step`` of the box's half-width per coordinate, along the gradient's sign);
* ``dr``: domain randomisation, a kernel drawn uniformly from the box for every training episode;
* ``worst-of-n``: ``adversary_candidates`` kernels drawn from the box, the policy run on each,
  training on the worst ``adversary_fraction`` of them by the Lagrangian value (EPOpt's idea);
* ``corners``: the policy run on the box's ``2^n`` corners, training on the worst one;
* ``search``: a few steps of the gradient worst-case search each iteration, for the reward and
  each constraint apart, training each on its own worst kernel found.

Each method declares its options in its file (``ltma_iterations`` in ``ltma.py``,
``adversary_candidates`` in ``worst_of_n.py``, ...), those several share on ``Adversary``
(``base.py``: ``ltma_horizon``, ``adversary_episodes``); ``Config.option`` reads them.

A non-robust algorithm has no adversary (``"none"`` in a family's method list). A method of
your own is one file with an ``Adversary`` subclass and one call, ``register(name, cls)``;
then ``ALGO+name`` and ``Config(adversary=name)`` choose it (docs/design.md).
"""

from __future__ import annotations

from rcmdp_jax.plugin import Registry

NONE = "none"

REGISTRY = Registry("robust method", "rcmdp_jax.adversary.base:Adversary", {
    "ltma": "rcmdp_jax.adversary.ltma:StudyLTMA",
    "ltma-norm": "rcmdp_jax.adversary.ltma_norm:NormalisedLTMA",
    "dr": "rcmdp_jax.adversary.randomise:DomainRandomisation",
    "worst-of-n": "rcmdp_jax.adversary.worst_of_n:WorstOfN",
    "corners": "rcmdp_jax.adversary.corners:Corners",
    "search": "rcmdp_jax.adversary.search:GradientSearch",
}, reserved={NONE: "the name of no method (a non-robust algorithm)"})  # fmt: skip
ADVERSARY_NAMES = REGISTRY.builtin  # the built-in methods (``config.Adversary``)
unregister, names, items = REGISTRY.unregister, REGISTRY.names, REGISTRY.items


def register(name: str, cls: type) -> type:
    """Add robust method ``name`` (``cls`` an ``Adversary`` subclass made without arguments;
    its ``step`` keeps the kernels in the box, ``env.project``); returns ``cls``."""
    from rcmdp_jax.adversary.base import Adversary

    if isinstance(cls, type) and issubclass(cls, Adversary) and cls.step is Adversary.step \
            and cls.step_state is Adversary.step_state:
        # else the nominal kernel throughout, trained as if robust
        raise ValueError(f"robust method {name!r}: {cls.__name__} does not define step(self, ctx, key, params, "
                         "env_xi, actor_params, lam_tilde, hp) -> (params, env_xi, steps spent); a robust method "
                         "moves the kernels there")  # fmt: skip
    return REGISTRY.register(name, cls)


def method_class(name: str) -> type:
    """The ``Adversary`` class of ``name`` (``"none"`` or one of ``names()``)."""
    if name == NONE:
        from rcmdp_jax.adversary.base import Nominal

        return Nominal
    try:
        return REGISTRY.get(name, "adversary")
    except ValueError:
        raise ValueError(f"unknown robust method {name!r}; choose one of: {', '.join((NONE, *names()))}") from None


def get(name: str):
    """An instance of the ``Adversary`` registered as ``name`` (``"none"`` or one of ``names()``)."""
    method = method_class(name)()
    method.name = name  # the program skips the lanes of a method named "none"
    return method


def method_of(cfg) -> str:
    """The robust method a config trains with (``"none"``: not robust)."""
    return cfg.adversary


def family_methods(configs) -> tuple[str, ...]:
    """The methods a family's configs use, in registry order (a family's static list)."""
    used = {method_of(c) for c in configs}
    return tuple(m for m in (NONE, *names()) if m in used)


__all__ = ["ADVERSARY_NAMES", "NONE", "REGISTRY", "family_methods", "get", "items", "method_class", "method_of", "names",
           "register", "unregister"]  # fmt: skip
