"""Plug-ins' own options in a config (``Config.options``, ``Config.option``) and the checks
a config's plug-ins make of it (``check``): the one place ``Config.validate`` reads the
learner, constraint rule and robust method registries (``rcmdp_jax.plugin``).

``Config.options`` holds the options set to other than their defaults, in name order
(``canonical``): two configs that train alike are equal. Its JSON form also spells out the
defaults of the plug-ins a config trains with (``explicit``), as the flat fields did, and a
config dict of an older version, with those options as flat keys, reads into it (``lifted``).
"""

from __future__ import annotations

from typing import Any

from rcmdp_jax import adversary, constraints, learners
from rcmdp_jax.plugin import (
    REGISTRIES,
    Number,
    check_kind,
    declarer,
    numbers_of,
    option_clash,
    option_owners,
    options_of,
    unknown_names,
)


def declared() -> dict[str, Any]:
    """Every registered plug-in's option -> its default; raises ``ValueError`` where two
    plug-ins have one name without sharing its declaring base (``plugin.option_clash``)."""
    out, owners = {}, option_owners()
    for r in REGISTRIES:
        for name, cls in r.items():
            for o, d in options_of(cls).items():
                if why := option_clash(f"{r.kind} {name!r}", cls, o, owners[o]):
                    raise ValueError(why)
                out[o] = d
    return out


def declared_numbers() -> dict[str, Number]:
    """Every registered plug-in's traced number (``plugin.Number``), ``{"NAME.number": Number}``
    in name order: the names ``HParams.number``, ``--set`` and ``sweep`` take."""
    out = {f"{name}.{n}": d for r in REGISTRIES for name, cls in r.items() for n, d in numbers_of(cls).items()}
    return dict(sorted(out.items()))


def _is_default(name: str, value: Any, defaults: dict[str, Any]) -> bool:
    return name in defaults and type(value) is type(defaults[name]) and value == defaults[name]


def canonical(pairs: tuple) -> tuple[tuple[str, Any], ...]:
    """``Config.options``' one form: the pairs in name order, those at their default left out
    (pairs that are not ``(str, hashable)`` as they are, for ``check`` to refuse)."""
    try:
        own = dict(pairs)
        hash(tuple(own.items()))
    except (TypeError, ValueError):
        return pairs
    if not all(isinstance(k, str) for k in own):
        return pairs
    defaults = declared() if own else {}
    return tuple(sorted((k, v) for k, v in own.items() if not _is_default(k, v, defaults)))


def used(cfg) -> tuple[type, ...]:
    """The plug-in classes ``cfg`` trains with: its learner, constraint rule and robust method."""
    rule = constraints.REGISTRY.get(cfg.constraint, "constraint")
    return learners.get(cfg.learner), rule, adversary.method_class(adversary.method_of(cfg))


def numbers_read(cfg) -> frozenset[str]:
    """The traced numbers (``"NAME.number"``) of the plug-ins ``cfg`` trains with."""
    mine = used(cfg)
    return frozenset(f"{name}.{n}" for r in REGISTRIES for name, cls in r.items() if cls in mine
                     for n in numbers_of(cls))  # fmt: skip


def merged(own: tuple, changes: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """``own`` (``Config.options``) with ``changes`` applied (``canonical``)."""
    return canonical(tuple({**dict(own), **changes}.items()))


def json_pairs(pairs) -> bool:
    """Whether ``pairs`` is ``Config.options``' JSON form: ``[name, value]`` pairs (lists or tuples)."""
    return isinstance(pairs, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in pairs)  # fmt: skip


def from_json(pairs) -> tuple[tuple[str, Any], ...]:
    """``Config.options`` from its JSON form (pairs as lists, tuples as lists); another form as it
    is, for ``check`` to refuse."""
    if not json_pairs(pairs):
        return pairs
    return canonical(tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in pairs))


def explicit(cfg) -> tuple[tuple[str, Any], ...]:
    """The JSON form of ``cfg.options``: every option of the plug-ins ``cfg`` trains with at
    its value, and the others it sets (a later default then reads as a difference)."""
    try:
        values = {o: cfg.option(o) for cls in used(cfg) for o in options_of(cls)}
    except ValueError:  # a plug-in that is not registered: refused by ``check``
        values = {}
    return tuple(sorted({**values, **dict(cfg.options)}.items()))


# settings that were config fields and are traced numbers now (``HParams``): an older dict's flat keys
NOW_NUMBERS = ("adam_eps", "max_grad_norm", "dropout")


def moved(names) -> str:
    """What the refusal of an unknown setting adds for each of ``names`` that a plug-in's number was
    called (``Number.formerly``): " (OLD is the traced number NEW now)"."""
    return "".join(f" ({x.formerly} is the traced number {n} now)"
                   for n, x in declared_numbers().items() if x.formerly and x.formerly in names)  # fmt: skip


def lifted(d: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """A config dict of an older version read as this version's: its keys that are not ``fields`` but
    plug-ins' options (flat fields then, e.g. ``adversary_candidates``) moved into its ``options``
    pairs, and its settings that are traced numbers now (``NOW_NUMBERS``; a plug-in's option
    then, ``Number.formerly``, e.g. ``search_eta``) into its ``hparams``."""
    d = _numbers_lifted(d, fields)
    known = declared()
    flat, pairs = [k for k in d if k not in fields and k in known], d.get("options", [])
    if not flat or not json_pairs(pairs):
        return d  # nothing to move, or options refused as they are
    if twice := sorted(set(flat) & {p[0] for p in pairs}):  # else the pairs' value would win unseen
        raise ValueError(f"{', '.join(twice)} given both as a key and in options; keep one")
    out = {k: v for k, v in d.items() if k not in flat}
    out["options"] = [[k, v] for k, v in {**{k: d[k] for k in flat}, **dict(pairs)}.items()]
    return out


def _numbers_lifted(d: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    now = {n: n for n in NOW_NUMBERS} | {x.formerly: n for n, x in declared_numbers().items() if x.formerly}
    pairs, hp = d.get("options", []), d.get("hparams", {})
    if not isinstance(pairs, list) or not isinstance(hp, dict):
        return d  # refused as they are
    flat = {k: v for k, v in d.items() if k not in fields and k in now}
    flat |= {p[0]: p[1] for p in pairs if isinstance(p, list) and len(p) == 2 and p[0] in now}
    if not flat:
        return d
    out = {k: v for k, v in d.items() if k not in flat}
    out["options"] = [p for p in pairs if not (isinstance(p, list) and len(p) == 2 and p[0] in now)]
    out["hparams"] = {**{now[k]: v for k, v in flat.items()}, **hp}
    return out


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
    plug-ins; every plug-in ``cfg`` uses checks its options (``Plugin.check_options``), and
    so does the one that declares an option ``cfg`` sets (its value refused even where unused);
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
            raise unknown_names([name], defaults, "option", " in options (no registered plug-in's)")
    learner, _, method = used(cfg)
    owners = option_owners()  # a set option is checked where it is declared, even for a plug-in cfg does not use
    for cls in dict.fromkeys((*used(cfg), *(declarer(owners[name][1], name) for name, _ in opts))):
        clash = fields & set(options_of(cls))
        if clash:
            raise ValueError(f"{cls.__name__}'s option(s) {sorted(clash)} are config fields already; rename them")
        cls.check_options(cfg)
    for name, v in opts:  # what a plug-in's own check let through: at least its default's kind
        check_kind(f"option {name}", v, defaults[name])
    if method.own_env_kernels(cfg) and not learner.per_env_kernels:
        shared = ", ".join(n for n, cls in adversary.items() if not cls.own_env_kernels(cfg))
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
        needs = [m for m in methods if adversary.method_class(m).own_env_kernels(cfg)]
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
