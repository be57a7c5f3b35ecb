"""The run plan from the command line (``build_plan`` -> ``run_plan.Plan``): every input
checked and every config built before anything is compiled or written."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from rcmdp_jax import auto_budget, envs, options, presets
from rcmdp_jax.config import BudgetRounded, Config, chosen_by
from rcmdp_jax.envs import ENV_NAMES
from rcmdp_jax.envs.brax_presets import brax_name
from rcmdp_jax.envs.domain import RULE_BUDGETS, LearnerSpec
from rcmdp_jax.envs.gymnax_presets import gymnax_name
from rcmdp_jax.hparams import validate_hparams
from rcmdp_jax.presets import ALGORITHMS, parse_algorithm, parse_setting, preset, schedule_variants, split_variant
from rcmdp_jax.sharding import available_cores
from rcmdp_jax.sizes import check_counts, check_memory, check_run_fields
from rcmdp_jax.study import user_code
from rcmdp_jax.study.run_folder import RunFolder
from rcmdp_jax.study.run_plan import Plan, PlanError, RunFolderError, check_folder_names, looked_up

AUTO = "auto"  # --budget auto: the budget rule read while training (rcmdp_jax.auto_budget)
LONG_RUN = 2 * 10**8  # policy steps (all algorithms and seeds) beyond which the plan says how long it may take


# fields that choose the algorithm or the run (``config.chosen_by``): set by --algos / --env, never by --set
_BY = {"algorithm": "--algos (its name: ALGO[-Robust][-RULE]-Lag[:SCHEDULE-TICK][+METHOD])", "algos": "--algos",
       "env": "--env"}  # fmt: skip
CHOSEN_ELSEWHERE = {f: _BY[by] for f, by in chosen_by().items()}


def parse_sets(sets) -> dict:
    """``--set KEY=VALUE ...`` as ``{key: value}`` (``presets.parse_setting``)."""
    out = {}
    for item in sets:
        if (parsed := parse_setting(item)) is None:
            raise PlanError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = parsed
        if key in CHOSEN_ELSEWHERE:
            raise PlanError(f"--set {key}=...: {key} is chosen by {CHOSEN_ELSEWHERE[key]}, not --set")
        if key in out:  # else the last would win without the first being checked
            raise PlanError(f"--set {key}=... is given more than once; give it once")
        out[key] = value
    return presets.check_sets(out)


def plan_envs(args) -> list[str]:
    """The environments of ``--env`` (with a gymnax or brax one's options; a user's loaded)."""
    given = any(x is not None for x in (args.uncertain, args.costs, args.noise))  # a gymnax or brax env's options
    outside, brax = args.env.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)), args.env.startswith(envs.BRAX_PREFIX)
    if given and not outside:
        raise PlanError("--uncertain, --costs and --noise apply to a gymnax environment (--env gymnax:ID; "
                        "--uncertain and --costs to a brax one too, brax:NAME)")  # fmt: skip
    if "@" in args.env and given:
        raise PlanError(f"--env {args.env} names its settings with @...: name the box and costs there too "
                        "(@uncertain=FIELD:WIDTH, @costs=...) and drop --uncertain/--costs/--noise, or give those with "
                        f"--env {args.env.partition('@')[0]}")  # fmt: skip
    if brax and args.noise is not None:
        raise PlanError("--noise applies to gymnax:ID; a brax preset's kernel noise is its own (docs/brax_envs.md)")
    own = user_code.is_source(args.env)
    try:
        if own:
            return [user_code.load_spec(args.env)[0]]
        if brax and "@" not in args.env:  # every spelling built (abstractly for gymnax): fields, widths, costs
            return [brax_name(args.env, args.uncertain, args.costs)]
        if outside and "@" not in args.env:
            return [gymnax_name(args.env, args.uncertain, args.costs, args.noise)]
        names = list(ENV_NAMES) if args.env == "all" else [args.env]
        for e in names:
            envs.check(e)
        return names
    except (ValueError, ImportError) as err:
        also = "" if own or outside or args.env.partition("@")[0] in ENV_NAMES else (
            "; or all, gymnax:ID or brax:NAME (any id, with --uncertain), PACKAGE.MODULE:NAME or FILE.py:NAME (your "
            "own environment)")  # fmt: skip
        raise PlanError(f"--env {args.env}: {err}{also}") from None


def plan_algos(args) -> list[str]:
    """The algorithm names of ``--algos`` / ``--schedules``, each one parsed."""
    if args.schedules and args.algos != "all":
        raise PlanError("--schedules chooses the algorithms itself; drop --algos")
    algos = [a.strip() for a in args.algos.split(",")] if args.algos != "all" else list(ALGORITHMS)
    algos = list(schedule_variants()) if args.schedules else algos
    if not any(algos):
        raise PlanError("--algos is empty")
    if not all(algos):  # "PPO,,MDPO": a name left out by mistake is not dropped silently
        raise PlanError(f"--algos {args.algos!r} has an empty name between commas; separate the names by single "
                        "commas")  # fmt: skip
    if repeated := sorted({a for a in algos if algos.count(a) > 1}):
        raise PlanError(f"--algos names {', '.join(repeated)} more than once")
    try:
        for a in algos:
            parse_algorithm(split_variant(a)[0])
        check_folder_names(algos)
    except ValueError as err:
        raise PlanError(f"--algos: {err}") from None
    return algos


def check_numbers(args) -> None:
    """The counts of the command line, ``--budget auto``'s and ``--devices``."""
    if args.steps is not None and args.steps < 1:
        raise PlanError(f"--steps must be a positive integer, got {args.steps}")
    try:
        check_run_fields(args.seeds, args.seed, args.n_test, lambda field: "--" + field.replace("_", "-"))
        if args.budget == AUTO:
            if args.distributed:
                raise ValueError("--budget auto searches in one process: drop --distributed, or give --steps N")
            auto_budget.check(args.seeds, auto_budget.DEFAULT_CAP if args.steps is None else args.steps)
    except ValueError as err:
        raise PlanError(str(err)) from None
    check_devices(args)


def check_devices(args) -> None:
    """``--devices``: 'auto', 'all' or N, at most this host's cores."""
    if args.devices not in ("all", "auto") and not (args.devices.isdigit() and int(args.devices) >= 1):
        raise PlanError(f"--devices must be 'auto', 'all' or a positive integer, got {args.devices!r}")
    if args.devices.isdigit() and not args.distributed:
        limit = max(available_cores(), 1)
        if int(args.devices) > limit and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
            raise PlanError(f"--devices {args.devices}: this host has {limit} CPU core(s); ask for at most {limit}")


def _named_alone(env: str, algo: str, budget: str) -> bool:
    """Whether ``algo``'s own ``@FIELD=VALUE`` is refused without any ``--set``."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            preset(env, algo, budget)
    except (ValueError, TypeError):
        return True
    return False


def _config(args, env: str, algo: str, budget: str, overrides: dict, notes: list) -> Config:
    """``algo`` on ``env``, checked; a budget it rounds, or ``--steps`` it does not run, in ``notes``."""
    try:
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
            warnings.simplefilter("always", BudgetRounded)  # said as a note; a value beyond float32 is refused
            cfg = preset(env, algo, budget, **overrides)
    except (ValueError, TypeError) as err:
        if args.steps is not None and str(err).startswith("total_timesteps"):
            where = "--steps"
        elif "@" in algo and _named_alone(env, algo, budget):
            where = f"--algos {algo}"
        else:  # no --set given: the environment's own settings
            where = "--set" if args.sets else f"--env {args.env}"
        raise PlanError(f"{where}: {err}") from None
    if args.n_test is not None and "margin_n" not in overrides and float(cfg.hparams.margin_z):
        cfg = cfg.replace(margin_n=float(args.n_test))  # the data margin, for the run's test
    check_counts(cfg, f"{algo} on {env}")
    try:  # each plug-in refuses an environment it cannot run now, not when it compiles
        presets.check_plugins_env(cfg)
    except ValueError as err:
        raise PlanError(f"--algos {algo} on --env {env}: {err}") from None
    rounded = [w for w in caught if issubclass(w.category, BudgetRounded)]
    for w in [w for w in caught if w not in rounded]:  # any other warning as it was
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if args.steps is None and rounded:
        notes.append(f"note: --set {rounded[0].message} on {env}")
    if args.steps is not None and cfg.num_iterations * cfg.batch_size != args.steps and not cfg.episodic:
        notes.append(f"note: --steps {args.steps}: {algo} on {env} runs {cfg.num_iterations} iteration(s) of "
                     f"{cfg.batch_size} policy steps = {cfg.num_iterations * cfg.batch_size} steps")  # fmt: skip
    return cfg


def build_plan(args) -> Plan:
    """Validate every input and build all configs; raises ``PlanError``. Compiles nothing."""
    envs_, algos = plan_envs(args), plan_algos(args)
    if any(e.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)) and not envs.gymnax_has_costs(e) for e in envs_):
        constrained = [a for a in algos if parse_algorithm(split_variant(a)[0])[1] != "none"]  # none can run here
        if constrained and args.algos != "all":
            raise PlanError(f"--env {args.env} has no constraint costs, so {', '.join(constrained)} cannot run; give "
                             "--costs FIELD:LIMIT,... or choose unconstrained algorithms (MCPMD, PPO, MDPO, RMCPMD, "
                             "PPO-Robust, MDPO-Robust)")  # fmt: skip
        if constrained:
            print(f"note: --env {args.env} has no constraint costs (--costs): the {len(algos) - len(constrained)} "
                  "unconstrained algorithms run", file=sys.stderr)  # fmt: skip
        algos = [a for a in algos if a not in constrained]
    check_numbers(args)
    overrides = parse_sets(args.sets)
    if args.steps is not None and "total_timesteps" in overrides:
        raise PlanError("--steps and --set total_timesteps=... both set the budget; give one")
    if args.steps is not None or args.budget == AUTO:  # auto: the presets' other settings, the cap's steps
        overrides.setdefault("total_timesteps", auto_budget.DEFAULT_CAP if args.steps is None else args.steps)
    budget, built, notes = "short" if args.budget == AUTO else args.budget, {}, []
    for e in envs_:
        built[e], seen = {a: _config(args, e, a, budget, overrides, notes) for a in algos}, {}
        for algo, cfg in built[e].items():  # two names of one configuration (@lr=1e-3, @lr=0.001) are refused
            key = dataclasses.replace(cfg, name="", hparams=cfg.hparams.for_program(options.numbers_read(cfg)))
            if (first := seen.setdefault(key, algo)) != algo:  # (a plug-in number no plug-in reads: the same)
                raise PlanError(f"--algos: {first} and {algo} are the same configuration; name it once")
        budgets = envs.spec(e).learner.budgets
        if args.steps is None and "total_timesteps" not in overrides and budget not in budgets:
            notes.append(f"note: --budget {budget}: {e} has no {budget} budget of its own; it runs its short one "
                         f"({budgets['short']:,} steps)")  # fmt: skip
    notes += unmeasured_budget_notes(envs_, args)
    check_memory(built, args.seeds, args.n_test)
    plan = Plan(envs=tuple(envs_), algos=tuple(algos), seeds=args.seeds, seed=args.seed, vmap=args.vmap,
                n_test=args.n_test, worst_case=args.worst_case, devices=args.devices,
                env_sources={e: user_code.SOURCES[e] for e in envs_ if e in user_code.SOURCES},
                env_descriptions={e: user_code.description(e) for e in envs_ if e in envs.registered()},
                plugins=tuple(user_code.PLUGINS.values())).with_configs(built)  # fmt: skip
    steps = args.seeds * sum(r["policy_steps"] for w in plan.will_run.values() for r in w.values())
    if steps > LONG_RUN:
        notes.append(f"note: {steps:,} policy steps in all ({args.seeds} seed(s)); at the ~50,000 steps/s of a 2-core "
                     f"CPU that is about {steps / 5e4 / 3600:.1f} h (progress is printed per family)")  # fmt: skip
    for note in notes:  # after every check: a refusal is one line
        print(note, file=sys.stderr)
    return plan


def unmeasured_budget_notes(envs_, args) -> list[str]:
    """A line for each environment whose budget the budget rule did not measure there."""
    if args.budget == AUTO or args.steps is not None:
        return []
    default, notes = LearnerSpec().budgets, []
    for e in envs_:
        budgets = envs.spec(e).learner.budgets
        steps = f"{budgets.get(args.budget, budgets['short']):,}"
        limit = envs.split_limit(e)
        if limit and limit[0] in RULE_BUDGETS:
            notes.append(f"note: {e}: the {args.budget} budget is {steps} policy steps, the one the budget rule "
                         f"measured on {limit[0]} at another limit than the study's (the study's own: --budget quick; "
                         "docs/budgets.md)")  # fmt: skip
        elif limit:
            notes.append(f"note: {e}: the {args.budget} budget ({steps} policy steps) is the study's, not measured at "
                         f"this limit; the study's domains start on plateaus the learners leave (docs/budgets.md), so "
                         f"--budget auto may stop early there: give --steps N")  # fmt: skip
        elif e not in envs.ENV_NAMES and budgets == default:
            notes.append(f"note: {e}: the {args.budget} budget ({steps} policy steps) was not measured by the budget "
                         "rule on this environment, and may be unconverged; --budget auto trains where the rule says "
                         "the learner has converged (docs/budgets.md)")  # fmt: skip
    return notes


def with_budgets(plan: Plan, budgets: dict[str, int]) -> Plan:
    """``plan`` with every algorithm on ``env`` at ``budgets[env]`` policy steps."""
    with warnings.catch_warnings():  # a budget whole batches round up: the search's lines say the budget
        warnings.simplefilter("ignore", BudgetRounded)
        return plan.with_configs({e: {a: c.replace(total_timesteps=int(budgets[e])) if e in budgets else c
                                      for a, c in cs.items()} for e, cs in plan.configs.items()})  # fmt: skip


def new_plan(args) -> Plan | None:
    """Every input checked and the plan built, before ``--distributed``'s handshake; None for ``--eval-only``."""
    if args.eval_only is not None and not args.eval_only.strip():
        raise PlanError("--eval-only is empty; name the run folder whose sweep to run again")
    if args.eval_only:
        check_devices(args)
        return None
    if args.out is not None and not args.out.strip():
        raise PlanError("--out is empty; name a run folder (or leave --out out for runs/<timestamp>)")
    if args.resume and args.out is None:
        raise PlanError("--resume continues the run folder --out names; give --out DIR")
    if args.out is not None and not args.resume and (out := looked_up(args.out))[1]:  # before the plan's notes
        raise PlanError(f"output folder {out[0]} already exists; use --resume to continue it or choose another --out"
                        if out[0].is_dir() else f"--out {out[0]} is a file, not a folder; choose another --out")  # fmt: skip
    load_plugins(args)
    if args.distributed:  # the plan is built after the handshake (gymnax's import starts JAX's backend)
        plan_algos(args)  # what can be checked before it
        check_numbers(args)
        try:
            with np.errstate(all="ignore"):
                validate_hparams(Config().replace(**parse_sets(args.sets)).hparams)
        except (ValueError, TypeError) as err:  # (a PlanError says its option already)
            raise PlanError(str(err) if isinstance(err, PlanError) else f"--set: {err}") from None
        return None
    return resumed_plan(args) or build_plan(args)


# --resume: the options run.json records as they are (``SAVED``), and those that build its configs
SAVED = ("seeds", "seed", "n_test", "vmap", "worst_case")
BUILT = ("env", "uncertain", "costs", "noise", "algos", "schedules", "budget", "steps", "sets")


def resumed_plan(args) -> Plan | None:
    """``--resume``: the options left out are run.json's (``--resume --out DIR`` alone continues), else None."""
    if not (args.resume and args.out and (Path(args.out) / "run.json").is_file()):
        return None
    saved = RunFolder(args.out).read_plan("--resume")
    for name in SAVED:
        if name not in args.given:
            setattr(args, name, getattr(saved, name))
    if not args.given & set(BUILT):
        return dataclasses.replace(saved, **{name: getattr(args, name) for name in SAVED})
    if not args.given & {"env", "uncertain", "costs", "noise"}:
        args.env = saved.envs[0] if len(saved.envs) == 1 else "all"
    if not args.given & {"algos", "schedules"}:
        args.algos, args.schedules = ",".join(saved.algos), False
    plan = build_plan(args)
    if args.given & {"budget", "steps", "sets"}:
        return plan
    return dataclasses.replace(plan, configs=saved.configs, will_run=saved.will_run)


def load_plugins(args) -> None:
    """``--plugins`` imported, with ``--resume`` run.json's first."""
    try:
        saved = json.loads((Path(args.out) / "run.json").read_text()) if args.resume and args.out else None
    except (OSError, ValueError):  # a run.json that cannot be read is said when the plan is read
        saved = None
    if isinstance(saved, dict):
        try:
            user_code.restore_plugins(saved)
        except ValueError as err:
            raise RunFolderError(f"--resume: {err}") from None
    try:
        loaded = user_code.load_plugin_specs(args.plugins)
    except ValueError as err:
        raise PlanError(str(err)) from None
    where = lambda r: r.get("file") or r.get("module")  # noqa: E731  (a plug-in record's file or module)
    if isinstance(saved, dict) and (new := {where(r) for r in loaded} - {where(r) for r in saved.get("plugins") or []}):
        raise PlanError(f"--resume: --plugins {sorted(new)[0]} is not a plug-in of the run in {args.out}; drop it "
                        "(the run's own load from its run.json), or train into a new --out")  # fmt: skip
