"""The run plan as ``run.json`` records it (``Plan``), what ``--resume`` compares, and the check of
a saved run.json with the command line's rules (``plan_problem``: an edited file is refused)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

from rcmdp_jax import envs
from rcmdp_jax import options as plug_ins
from rcmdp_jax.adversary import NONE
from rcmdp_jax.config import ALGORITHM_FIELDS, Config, config_from_dict, config_to_dict
from rcmdp_jax.hparams import HPARAM_FIELDS
from rcmdp_jax.plugin import options_of
from rcmdp_jax.presets import parse_algorithm, preset, split_variant
from rcmdp_jax.sizes import PlanError, check_run_fields, derived_counts  # noqa: F401  (PlanError: the study's refusal)


class RunFolderError(ValueError):
    """A run folder this command cannot use: one line, exit status 2."""


def folder_name(name: str) -> str:
    """A run folder's name for an environment or algorithm: letters, digits, ``-``, ``_`` and ``.``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "_"


def check_folder_names(names) -> None:
    """``ValueError`` if two names would share a run folder (``folder_name``)."""
    seen: dict[str, str] = {}
    for n in names:
        if (folder := folder_name(n)) in seen:
            raise ValueError(f"{seen[folder]!r} and {n!r} would share the folder {folder!r}; rename one")
        seen[folder] = n


def looked_up(path, flag: str = "--out") -> tuple[Path, bool]:
    """``path`` made absolute and whether it exists; ``RunFolderError`` if it cannot be looked up (a loop of links)."""
    try:
        path, given = Path(path).resolve(), Path(path)
        os.stat(path)
    except FileNotFoundError:
        if link := next((p for p in (given, *given.parents) if os.path.islink(p) and not p.exists()), None):
            raise RunFolderError(f"{flag} {given}: {link} links to {os.readlink(link)}, which does not exist") from None
        if inside := next((p for p in path.parents if os.path.isfile(p / "run.json")), None):  # --resume may remove it
            raise RunFolderError(f"{flag} {path} is inside the run folder {inside}; choose one outside it") from None
        return path, False
    except (OSError, RuntimeError) as err:
        raise RunFolderError(f"{flag} {path}: {getattr(err, 'strerror', None) or err}") from None
    return path, True


# the keys every run.json has; the others default (``Plan.from_dict``)
REQUIRED_KEYS = ("envs", "algos", "seeds", "seed", "vmap", "configs", "n_test")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every choice of a run, checked (``plan.build_plan``)."""

    envs: tuple[str, ...]
    algos: tuple[str, ...]
    seeds: int
    seed: int
    vmap: bool
    n_test: int | None
    worst_case: str | None = None  # --worst-case: None, "all" or "costs"
    devices: str = "auto"
    configs: dict[str, dict[str, Config]] = dataclasses.field(default_factory=dict)  # {env: {algo: Config}}
    will_run: dict[str, dict[str, dict[str, int]]] = dataclasses.field(default_factory=dict)  # ``will_run_of``
    env_sources: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # how a fresh process rebuilds
    env_descriptions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # what tells them apart
    plugins: tuple[dict[str, Any], ...] = ()  # --plugins' files and modules (``user_code.load_plugin``)

    def to_dict(self) -> dict[str, Any]:
        """run.json's object: every field in order, the last three only where they hold something."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["configs"] = {e: {a: config_to_dict(c) for a, c in cs.items()} for e, cs in self.configs.items()}
        return {k: v for k, v in out.items() if v or k not in ("env_sources", "env_descriptions", "plugins")}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """The plan of a ``run.json`` object that ``plan_problem`` accepts."""
        known = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in d.items() if k in known and (v is not None or k == "n_test")}
        if isinstance(kept.get("worst_case"), bool):  # a folder from before --worst-case took a value
            kept["worst_case"] = "all" if kept["worst_case"] else None
        configs = {e: {a: config_from_dict(c) for a, c in cs.items()} for e, cs in d["configs"].items()}
        kept["plugins"] = tuple(kept.get("plugins", ()))
        return cls(**{**kept, "envs": tuple(d["envs"]), "algos": tuple(d["algos"]), "configs": configs})

    def with_configs(self, configs: dict) -> Plan:
        """This plan with ``configs``, each as run.json records it, and what each will run."""
        configs = {e: {a: config_from_dict(config_to_dict(c)) for a, c in cs.items()} for e, cs in configs.items()}
        will_run = {e: {a: will_run_of(c) for a, c in cs.items()} for e, cs in configs.items()}
        return dataclasses.replace(self, configs=configs, will_run=will_run)

    def differences(self, current: Plan) -> list[str]:
        """What differs between this saved plan and the ``current`` command's (``[]``: none)."""
        differ = [k for k in ("envs", "algos", "seeds", "seed", "vmap", "n_test")
                  if getattr(self, k) != getattr(current, k)]  # fmt: skip
        if self.worst_case != current.worst_case:  # else a table of only the resumed part
            differ.append("--worst-case")
        if differ:  # else the fields and options in which the configs differ, ``env/algo: field, ...``
            return differ
        out = []
        for env, algo in [(e, a) for e in current.configs for a in current.configs[e]]:
            saved, cfg = self.configs[env][algo], current.configs[env][algo]
            read = {o for cls in plug_ins.used(cfg) for o in options_of(cls)}  # (another plug-in's has no effect)
            numbers = {*saved.hparams.plugin_names, *cfg.hparams.plugin_names}
            old, new = _fields(saved, read, numbers), _fields(cfg, read, numbers)
            if fields := [k for k in new if old[k] != new[k]]:
                out.append(f"{env}/{algo}: {', '.join(fields)}")
        if out:
            differ.append("configs: " + "; ".join(out[:3]) + (f"; and {len(out) - 3} more" if len(out) > 3 else ""))
        return differ


def _fields(cfg: Config, read: set[str], numbers: set[str]) -> dict[str, Any]:
    """The hyperparameters, plug-in ``numbers``, other fields and the options ``read`` of ``cfg`` in one dict."""
    hp = {f: getattr(cfg.hparams, f) for f in HPARAM_FIELDS} | {n: cfg.hparams.number(n) for n in sorted(numbers)}
    own = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(Config) if f.name not in ("hparams", "options")}
    return {**hp, **own, **{o: cfg.option(o) for o in sorted(read)}}


# --- a saved run.json checked before it is read ---
def config_problem(env: str, algo: str, d) -> str:
    """What is wrong with the saved config of ``algo`` on ``env`` ("" if nothing)."""
    if not isinstance(d, dict):
        return "a config is not an object"
    # an older version's ``robust`` beside the ``adversary`` it named either way (``--set adversary``
    # chose the method of a robust algorithm then): what the name decides of it is robust or not
    legacy = isinstance(d.get("robust"), bool)
    try:
        cfg = config_from_dict(d)
    except (TypeError, ValueError, OverflowError) as err:  # OverflowError: an int beyond every float
        return str(err)
    if cfg.env != env:
        return f"its env is {cfg.env!r}, not {env!r}"
    if cfg.name and cfg.name != algo:
        return f"its name is {cfg.name!r}, not {algo!r}"
    reference = preset(env, algo, "short")  # the algorithm its name says
    named = lambda c, f: (c.adversary != NONE) if legacy and f == "adversary" else getattr(c, f)
    if differ := [f for f in ALGORITHM_FIELDS if named(cfg, f) != named(reference, f)]:
        return f"{', '.join(differ)} do not match the algorithm {algo}"
    for field, what, n in derived_counts(cfg):
        if n > 2**31 - 1:
            return f"{field}: {what} = {n:,} is beyond int32"
    return ""


def will_run_of(cfg: Config) -> dict[str, int]:
    """What will run, recorded in run.json: MCPMD stops once its episodes have spent the budget."""
    steps = cfg.total_timesteps if cfg.episodic else cfg.num_iterations * cfg.batch_size
    return {"iterations": cfg.num_iterations, "policy_steps": steps}


def plan_problem(plan: dict) -> str:
    """What makes a ``run.json`` unusable ("" if nothing)."""
    names = lambda v: isinstance(v, list) and v and all(isinstance(x, str) for x in v) and len(set(v)) == len(v)
    if unknown := sorted(set(plan) - {f.name for f in dataclasses.fields(Plan)}):
        return f"unknown key(s) {unknown}"
    if not names(plan["envs"]) or not names(plan["algos"]):
        return "envs and algos must be lists of distinct names"
    if not isinstance(plan["vmap"], bool):
        return f"vmap must be true or false, got {plan['vmap']!r}"
    if plan.get("worst_case") not in (None, True, False, "all", "costs"):
        return f'worst_case must be null, "all" or "costs", got {plan["worst_case"]!r}'
    try:
        check_run_fields(plan["seeds"], plan["seed"], plan["n_test"])
        for e in plan["envs"]:
            envs.check(e)
        for a in plan["algos"]:
            parse_algorithm(split_variant(a)[0])
    except (ValueError, ImportError) as err:
        return str(err)
    configs = plan["configs"]
    if not isinstance(configs, dict) or any(
        not isinstance(configs.get(e), dict) or set(configs[e]) != set(plan["algos"]) for e in plan["envs"]
    ):
        return "configs must hold one config per environment and algorithm"
    will_run = plan.get("will_run")  # absent in older run folders; else what build_plan derives from each config
    for e in plan["envs"]:
        for a in plan["algos"]:
            if problem := config_problem(e, a, configs[e][a]):
                return f"configs.{e}.{a}: {problem}"
            per_env = will_run.get(e) if isinstance(will_run, dict) else None
            got = per_env.get(a) if isinstance(per_env, dict) else None
            if will_run and got != (want := will_run_of(config_from_dict(configs[e][a]))):
                return f"will_run.{e}.{a} is {got!r}, but its config runs {want}"
    return ""
