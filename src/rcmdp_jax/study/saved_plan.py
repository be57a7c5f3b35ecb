"""A saved ``run.json`` checked with the command line's rules before anything is read,
restored or rewritten (``plan_problem``): an edited file is refused, never "repaired"."""

from __future__ import annotations

import dataclasses

from rcmdp_jax import options
from rcmdp_jax.config import ALGORITHM_FIELDS, Config, config_from_dict
from rcmdp_jax.hparams import HPARAM_FIELDS
from rcmdp_jax.plugin import check_seed

_FIELDS = {f.name: f for f in dataclasses.fields(Config) if f.name != "hparams"}
_HP_FIELDS = set(HPARAM_FIELDS)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type_problem(field: str, value) -> str:
    """A JSON value that is not of ``Config.field``'s type ("" if it is)."""
    default = getattr(Config(), field)
    if field == "options":  # plug-ins' options: [name, value] pairs
        ok = isinstance(value, list) and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value
        )
    elif isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = _is_int(value)
    elif isinstance(default, float):
        ok = _is_int(value) or isinstance(value, float)
    elif isinstance(default, tuple):
        ok = isinstance(value, list) and all(_is_int(h) for h in value)
    else:
        ok = isinstance(value, str)
    return "" if ok else f"{field}={value!r} is not a {type(default).__name__}"


def config_problem(env: str, algo: str, d) -> str:
    """What is wrong with the saved config of ``algo`` on ``env`` ("" if nothing)."""
    from rcmdp_jax.presets import preset
    from rcmdp_jax.study.sizes import derived_counts

    if not isinstance(d, dict):
        return "a config is not an object"
    pairs = d.get("options", [])
    pairs = pairs if isinstance(pairs, list) else []
    named = {p[0] for p in pairs if isinstance(p, list) and p and isinstance(p[0], str)}
    if twice := sorted(named & (set(d) - set(_FIELDS))):  # else the options' value would win unseen
        return f"{', '.join(twice)} given both as a key and in options; keep one"
    d = options.lifted(d, set(_FIELDS) | {"hparams"})  # an older version's flat fields that are options now
    hp = d.get("hparams", {})
    if not isinstance(hp, dict):
        return "hparams is not an object"
    unknown = sorted((set(d) - set(_FIELDS) - {"hparams"}) | (set(hp) - _HP_FIELDS - set(options.declared_numbers())))
    if unknown:
        return f"unknown config field(s) {unknown}"
    for field, value in d.items():
        if field != "hparams" and (problem := _type_problem(field, value)):
            return problem
    for field, value in hp.items():
        if not (_is_int(value) or isinstance(value, float)):
            return f"hparams.{field}={value!r} is not a number"
    try:
        cfg = config_from_dict(d)
    except (TypeError, ValueError) as err:
        return str(err)
    if cfg.env != env:
        return f"its env is {cfg.env!r}, not {env!r}"
    if cfg.name and cfg.name != algo:
        return f"its name is {cfg.name!r}, not {algo!r}"
    reference = preset(env, algo, "short")  # the algorithm its name says
    if differ := [f for f in ALGORITHM_FIELDS if getattr(cfg, f) != getattr(reference, f)]:
        return f"{', '.join(differ)} do not match the algorithm {algo}"
    for field, what, n in derived_counts(cfg):
        if n > 2**31 - 1:
            return f"{field}: {what} = {n:,} is beyond int32"
    return ""


def will_run_problem(plan: dict) -> str:
    """``will_run`` (absent in older run folders) must say what the configs run: the
    numbers ``plan.build_plan`` derives from each."""
    will_run = plan.get("will_run")
    if not will_run:
        return ""
    for e in plan["envs"]:
        for a in plan["algos"]:
            cfg = config_from_dict(options.lifted(plan["configs"][e][a], set(_FIELDS) | {"hparams"}))
            steps = cfg.total_timesteps if cfg.episodic else cfg.num_iterations * cfg.batch_size
            want = {"iterations": cfg.num_iterations, "policy_steps": steps}
            per_env = will_run.get(e) if isinstance(will_run, dict) else None
            got = per_env.get(a) if isinstance(per_env, dict) else None
            if got != want:
                return f"will_run.{e}.{a} is {got!r}, but its config runs {want}"
    return ""


def plan_problem(plan: dict) -> str:
    """What makes a ``run.json`` unusable ("" if nothing): a value the command line would
    refuse, or configs that do not match its environments and algorithms."""
    from rcmdp_jax import envs
    from rcmdp_jax.presets import parse_algorithm, split_variant

    def names(v):
        return isinstance(v, list) and v and all(isinstance(x, str) for x in v) and len(set(v)) == len(v)

    from rcmdp_jax.study.run_plan import Plan

    if unknown := sorted(set(plan) - {f.name for f in dataclasses.fields(Plan)}):
        return f"unknown key(s) {unknown}"
    if not names(plan["envs"]) or not names(plan["algos"]):
        return "envs and algos must be lists of distinct names"
    if not (_is_int(plan["seeds"]) and plan["seeds"] >= 1) or not isinstance(plan["vmap"], bool):
        return "seeds must be a positive integer, vmap true or false"
    try:
        check_seed("seed", plan["seed"])
    except ValueError as err:
        return str(err)
    if plan["n_test"] is not None and not (_is_int(plan["n_test"]) and plan["n_test"] >= 1):
        return "n_test must be null or a positive integer"
    if plan.get("worst_case") not in (None, True, False, "all", "costs"):
        return f'worst_case must be null, "all" or "costs", got {plan["worst_case"]!r}'
    try:
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
    for e in plan["envs"]:
        for a in plan["algos"]:
            if problem := config_problem(e, a, configs[e][a]):
                return f"configs.{e}.{a}: {problem}"
    return will_run_problem(plan)
