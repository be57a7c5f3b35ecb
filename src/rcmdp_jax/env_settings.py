"""Per-environment plug-in settings: what an environment's spec chooses for a learner, a
constraint rule or a robust method (PPO's epochs, LTMA's steps per batch), declared by the plug-in
(``Plugin.env_settings``, with defaults) and turned into a preset config's fields by the plug-in
(``Plugin.preset``, which ``presets.preset`` calls).

A spec gives them by the plug-in's registered name (``LearnerSpec.plugins``)::

    learner={"plugins": {"ppo": {"epochs": 50, "target_kl": 0.01}, "ltma": {"per_100": 10.0}}}

A subclass reads its bases' settings under their names (``ppo-norm`` reads ``ppo``'s) and its
own under its own. The names and values are checked when a preset is built (``check``), when
every plug-in, a ``--plugins`` file's too, is registered.
"""

from __future__ import annotations

import reprlib
from typing import Any

from rcmdp_jax.plugin import REGISTRIES, Number, check_count, check_kind, options_of

WHERE = "learner['plugins']"  # how an error names the spec's settings


def where(name: str, key: str) -> str:
    """How an error names setting ``key`` of plug-in ``name``: ``learner['plugins']['ppo']['epochs']``."""
    return f"{WHERE}[{name!r}][{key!r}]"


def declarers() -> dict[str, type]:
    """Every registered name whose class declares per-environment settings itself -> the class."""
    out: dict[str, type] = {}
    for registry in REGISTRIES:
        for name, cls in registry.items():
            if "env_settings" in vars(cls):
                out.setdefault(name, cls)
    return out


def settings_for(cls: type, given: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Plug-in class ``cls``'s settings on an environment whose spec gives ``given``: each of
    its classes' declared defaults (bases first), each overridden by the spec's values under
    that class's registered name."""
    names: dict[type, str] = {}
    for name, c in declarers().items():
        names.setdefault(c, name)
    out: dict[str, Any] = {}
    for c in reversed(cls.__mro__):
        if "env_settings" in vars(c):
            out |= {**defaults(c), **given.get(names.get(c, ""), {})}
    return out


def defaults(cls: type) -> dict[str, Any]:
    """The per-environment settings ``cls`` declares itself, at their defaults (a ``Number``'s its
    ``default``)."""
    return {k: d.default if isinstance(d, Number) else d for k, d in vars(cls)["env_settings"].items()}


def check(given: Any) -> None:
    """Refuse a spec's settings that name no registered plug-in with settings, a setting the
    plug-in does not declare, a value not of its default's kind, or one its plug-in refuses
    (``Plugin.check_settings``, every plug-in's whichever a config trains), naming what is allowed."""
    check_shape(given)
    owners = declarers()
    for name, values in given.items():
        if name not in owners:
            raise ValueError(f"{WHERE}[{name!r}]: no registered plug-in of that name has per-environment settings; "
                             f"those that have: {', '.join(sorted(owners))} (a plug-in reads its bases' under their "
                             f"names: ppo-norm reads ppo's; ltma's horizon is ltma-norm's too)")  # fmt: skip
        declared = vars(owners[name])["env_settings"]
        for key, value in values.items():
            if key not in declared:
                inherited = sorted(set(settings_for(owners[name], {})) - set(declared))
                also = f" (and reads {', '.join(inherited)} under its bases' names)" if inherited else ""
                raise ValueError(f"unknown setting {where(name, key)}; {name!r} has: {', '.join(declared)}{also}")
            check_kind(where(name, key), value, declared[key])  # a Number's range, else its default's kind
    for cls in owners.values():
        cls.check_settings(settings_for(cls, given))


def check_shape(given: Any) -> None:
    """Refuse a spec's ``plugins`` that is not ``{plug-in name: {setting: value}}`` (``LearnerSpec``
    checks it so when made; the names and values wait for ``check``)."""
    ok = isinstance(given, dict) and all(
        isinstance(n, str) and isinstance(v, dict) and all(isinstance(k, str) for k in v) for n, v in given.items()
    )
    if not ok:
        raise ValueError(f"{WHERE} must be a dict {{plug-in name: {{setting: value}}}} (e.g. "
                         f"{{'ppo': {{'epochs': 20}}}}), got {reprlib.repr(given)}")  # fmt: skip


# the settings a LearnerSpec once held flat, now the plug-in's that declares them (a spec's dict may
# still give them so: ``lift_legacy``)
LEGACY_KEYS = {
    "ppo_epochs": ("ppo", "epochs"), "ppo_target_kl": ("ppo", "target_kl"),
    "ppo_dual_epochs_from_policy": ("ppo", "dual_epochs_from_policy"), "ltma_per_100": ("ltma", "per_100"),
    "ltma_horizon": ("ltma", "horizon"), "mcpmd_ltma": ("ltma", "per_episode"),
    "ltma_dual_reading": ("ltma", "dual_reading"),
}  # fmt: skip


def lift_legacy(learner: dict) -> dict:
    """A spec's ``learner`` dict with its flat settings of older specs (``LEGACY_KEYS``) under
    their plug-ins (its ``plugins``' shape checked first: ``check_shape``)."""
    old = {k: learner[k] for k in LEGACY_KEYS if k in learner}
    if not old:
        return learner
    plugins = {n: dict(v) for n, v in learner.get("plugins", {}).items()}
    for key, value in old.items():
        name, setting = LEGACY_KEYS[key]
        if setting in plugins.get(name, {}):
            raise ValueError(f"learner[{key!r}] and {where(name, setting)} are one setting; "
                             f"give it once (the second: {key!r} is its older spelling)")  # fmt: skip
        plugins.setdefault(name, {})[setting] = value
    return {**{k: v for k, v in learner.items() if k not in old}, "plugins": plugins}


def check_count_setting(name: str, key: str, value: int) -> None:
    """Refuse a setting that must be a positive integer within the int32 counters."""
    check_count(where(name, key), value)


def own_part(who: str, cls: type, fields: dict[str, Any], given: dict[str, dict[str, Any]], domain) -> dict[str, Any]:
    """``fields`` with a rule's or robust method's ``preset`` applied (``who``: its kind and name),
    which may set only its own options: every preset runs it, whichever method a config trains."""
    out = cls.preset(fields, settings_for(cls, given), domain)
    own = options_of(cls)
    changed = {k for k in out.keys() | fields.keys() if k not in out or k not in fields or out[k] != fields[k]}
    if stray := sorted(changed - own.keys()):
        raise ValueError(f"{who}: its preset may set only its own options ({', '.join(options_of(cls)) or 'none'}), "
                         f"it set {', '.join(stray)}")  # fmt: skip
    return out
