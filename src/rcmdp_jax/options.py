"""Plug-ins' own options in a config (``Config.options``, ``Config.option``) and the checks
a config's plug-ins make of it (``check``): the one place ``Config.validate`` reads the
learner, constraint rule and robust method registries (``rcmdp_jax.plugin``)."""

from __future__ import annotations

from typing import Any

from rcmdp_jax import adversary, constraints, learners
from rcmdp_jax.plugin import REGISTRIES


def declared() -> dict[str, Any]:
    """Every registered plug-in's option -> its default."""
    return {o: d for r in REGISTRIES for _, cls in r.items() for o, d in cls.options.items()}


def used(cfg) -> tuple[type, ...]:
    """The plug-in classes ``cfg`` trains with: its learner, constraint rule and robust method."""
    rule = constraints.REGISTRY.get(cfg.constraint, "constraint")
    return learners.get(cfg.learner), rule, adversary.method_class(adversary.method_of(cfg))


def merged(own: tuple, changes: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """``own`` (``Config.options``) with ``changes`` applied, in name order (one form, hashable)."""
    return tuple(sorted({**dict(own), **changes}.items()))


def from_json(pairs) -> tuple[tuple[str, Any], ...]:
    """``Config.options`` from its JSON form (pairs as lists, tuples as lists)."""
    return tuple((str(k), tuple(v) if isinstance(v, list) else v) for k, v in pairs)


def value(cfg, name: str) -> Any:
    """Option ``name`` of ``cfg``: its own value, else the declaring plug-in's default."""
    own = dict(cfg.options)
    if name in own:
        return own[name]
    defaults = declared()
    if name not in defaults:
        raise ValueError(f"option {name!r} is no registered plug-in's; options: {', '.join(defaults) or 'none'}")
    return defaults[name]


def check(cfg, fields: set[str]) -> None:
    """Raise ``ValueError`` naming the option: ``cfg.options`` must be options of registered
    plug-ins; every plug-in ``cfg`` uses checks its options (``Plugin.check_options``);
    a learner that does not honour per-env kernels refuses a method that gives them."""
    opts = cfg.options
    if not isinstance(opts, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in opts):
        raise ValueError(f"options must be a tuple of (name, value) pairs (set them as fields), got {opts!r}")
    defaults = declared()
    for name, v in opts:
        try:
            hash(v)
        except TypeError:
            raise ValueError(f"option {name}={v!r} must be a number, a string, a bool or a tuple") from None
        if name not in defaults:
            raise ValueError(f"options: {name!r} is no registered plug-in's option; options: "
                             f"{', '.join(defaults) or 'none'}")  # fmt: skip
    learner, _, method = used(cfg)
    for cls in used(cfg):
        clash = fields & set(cls.options)
        if clash:
            raise ValueError(f"{cls.__name__}'s option(s) {sorted(clash)} are config fields already; rename them")
        cls.check_options(cfg)
    if method.per_env and not learner.per_env_kernels:
        shared = ", ".join(n for n, cls in adversary.items() if not cls.per_env)
        raise ValueError(f"adversary={cfg.adversary!r} gives each rollout env a kernel of its own, which learner="
                         f"{cfg.learner!r} does not honour (Learner.per_env_kernels); choose a method without them "
                         f"({shared}) or a learner that has them")  # fmt: skip


def check_env(cfg, env, methods: tuple[str, ...]) -> None:
    """Every plug-in of a program refuses an environment it cannot run (``Plugin.check_env``):
    ``cfg``'s learner and rule, and the program's robust ``methods``."""
    learner = learners.get(cfg.learner)
    for cls in (learner, constraints.REGISTRY.get(cfg.constraint, "constraint"), *map(adversary.method_class, methods)):
        cls.check_env(env, cfg)
    if not learner.per_env_kernels:
        needs = [m for m in methods if adversary.method_class(m).per_env]
        if needs:
            raise ValueError(f"adversary={needs[0]!r} gives each rollout env a kernel of its own, which learner="
                             f"{cfg.learner!r} does not honour (Learner.per_env_kernels)")  # fmt: skip


def plain(value: Any) -> Any:
    """NumPy scalars (and tuples of them) as Python's: ``np.int64(2)`` is an integer, and
    a config stays hashable and JSON-ready."""
    import numpy as np

    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value
