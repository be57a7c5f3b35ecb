"""The run plan: what one command trains and tests, as ``run.json`` records it
(``Plan.to_json`` / ``Plan.from_json``), and what ``--resume`` compares
(``Plan.differences``). ``plan.build_plan`` makes one from the command line;
``saved_plan.plan_problem`` checks a saved one before it is read."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rcmdp_jax import options as plug_ins
from rcmdp_jax.config import Config, config_from_dict, config_to_dict
from rcmdp_jax.hparams import HPARAM_FIELDS
from rcmdp_jax.plugin import options_of

# the keys every run.json has; the others default (``Plan.from_dict``)
REQUIRED_KEYS = ("envs", "algos", "seeds", "seed", "vmap", "configs", "n_test")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every choice of a run, checked (``plan.build_plan``).

    ``configs``: ``{env: {algo: Config}}``, each as ``run.json`` records it
    (``config_to_dict``); ``will_run``: ``{env: {algo: {"iterations",
    "policy_steps"}}}``, what will run; ``env_sources``: how a fresh process rebuilds
    the user environments among ``envs`` (``user_env.sources``); ``env_descriptions``:
    what tells them from another environment under the same name
    (``user_env.descriptions``); ``plugins``: the plug-in files and modules a fresh process
    imports first (``plugin_files.restore``)."""

    envs: tuple[str, ...]
    algos: tuple[str, ...]
    seeds: int
    seed: int
    vmap: bool
    n_test: int | None
    configs: dict[str, dict[str, Config]]
    worst_case: str | None = None  # --worst-case: None, "all" or "costs"
    devices: str = "auto"
    will_run: dict[str, dict[str, dict[str, int]]] = dataclasses.field(default_factory=dict)
    env_sources: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    env_descriptions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    plugins: tuple[dict[str, Any], ...] = ()  # --plugins' files and modules (``plugin_files.load``)

    def to_dict(self) -> dict[str, Any]:
        """The ``run.json`` object (``env_sources`` and ``env_descriptions`` only where there are
        user environments)."""
        out = {"envs": list(self.envs), "algos": list(self.algos), "seeds": self.seeds, "seed": self.seed,
               "vmap": self.vmap, "n_test": self.n_test, "worst_case": self.worst_case, "devices": self.devices,
               "configs": {e: {a: config_to_dict(c) for a, c in cs.items()} for e, cs in self.configs.items()},
               "will_run": self.will_run}  # fmt: skip
        if self.env_sources:
            out["env_sources"] = self.env_sources
        if self.env_descriptions:
            out["env_descriptions"] = self.env_descriptions
        if self.plugins:
            out["plugins"] = list(self.plugins)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """The plan of a ``run.json`` object that ``saved_plan.plan_problem`` accepts
        (which refuses unknown keys; here they are ignored); ``worst_case``, ``devices``,
        ``will_run``, ``env_sources`` and ``env_descriptions`` default."""
        known = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in d.items() if k in known and (v is not None or k == "n_test")}
        if isinstance(kept.get("worst_case"), bool):  # a folder from before --worst-case took a value
            kept["worst_case"] = "all" if kept["worst_case"] else None
        configs = {e: {a: config_from_dict(c) for a, c in cs.items()} for e, cs in d["configs"].items()}
        kept["plugins"] = tuple(kept.get("plugins", ()))
        return cls(**{**kept, "envs": tuple(d["envs"]), "algos": tuple(d["algos"]), "configs": configs})

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    def differences(self, current: Plan) -> list[str]:
        """What differs between this saved plan and the ``current`` command's, as
        ``--resume`` names it (``[]``: none)."""
        differ = [k for k in ("envs", "algos", "seeds", "seed", "vmap", "n_test")
                  if getattr(self, k) != getattr(current, k)]  # fmt: skip
        if self.worst_case != current.worst_case:  # else a table of only the resumed part
            differ.append("--worst-case")
        if not differ and (fields := config_differences(self.configs, current.configs)):
            differ.append(f"configs: {fields}")
        return differ


def _fields(cfg: Config, options: set[str], numbers: set[str]) -> dict[str, Any]:
    """One level: the hyperparameters (``numbers``: the plug-ins' numbers either side sets),
    the config's other fields, then ``options`` (names)."""
    hp = {f: getattr(cfg.hparams, f) for f in HPARAM_FIELDS}
    hp |= {n: cfg.hparams.number(n) for n in {*cfg.hparams.plugin_names, *numbers}}
    own = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(Config) if f.name not in ("hparams", "options")}
    return {**hp, **own, **{o: dict(cfg.options).get(o, _DEFAULT) for o in sorted(options)}}


_DEFAULT = object()  # an option a config leaves at its default (``Config.options`` holds the others)


def config_differences(saved: dict, current: dict) -> str:
    """The config fields and plug-ins' options in which a saved run's configs differ from this
    command's, as ``env/algo: field, ...`` ("" if none; a field the saved run.json lacks is
    its default, as ``config_from_dict`` reads it)."""
    out = []
    for env in current:
        for algo, cfg in current[env].items():
            # the options either side sets that a plug-in of the algorithm reads (another has no effect)
            read = {o for cls in plug_ins.used(cfg) for o in options_of(cls)}
            options = {o for c in (saved[env][algo], cfg) for o, _ in c.options} & read
            numbers = {n for c in (saved[env][algo], cfg) for n in c.hparams.plugin_names}
            old, new = _fields(saved[env][algo], options, numbers), _fields(cfg, options, numbers)
            if fields := [k for k in new if old[k] != new[k]]:
                out.append(f"{env}/{algo}: {', '.join(fields)}")
    return "; ".join(out[:3]) + (f"; and {len(out) - 3} more" if len(out) > 3 else "")
