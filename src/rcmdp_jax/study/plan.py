"""The run plan from the command line: every input validated and every config built
before anything is compiled or written (``build_plan`` -> ``run_plan.Plan``), with the
plan's part for environments outside the study: ``--env PACKAGE.MODULE:NAME`` /
``FILE.py:NAME`` loaded (``user_code``), and the algorithms an environment without
constraint costs can run (``keep_constrained``)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import sys
import warnings
from pathlib import Path

import jax
import numpy as np

from rcmdp_jax import adversary, envs, options
from rcmdp_jax.config import BudgetRounded, Config, chosen_by, config_from_dict, config_to_dict
from rcmdp_jax.envs import ENV_NAMES
from rcmdp_jax.envs.domain import BUDGETS, RULE_BUDGETS, LearnerSpec
from rcmdp_jax.hparams import validate_hparams
from rcmdp_jax.plugin import check_seed
from rcmdp_jax.presets import ALGORITHMS, parse_algorithm, preset, schedule_variants, split_variant
from rcmdp_jax.sharding import available_cores
from rcmdp_jax.sizes import check_counts, check_memory
from rcmdp_jax.study import user_code
from rcmdp_jax.study.run_plan import Plan, PlanError, RunFolderError, will_run_of

LONG_RUN = 2 * 10**8  # policy steps (all algorithms and seeds) beyond which the plan says how long it may take


# fields that choose the algorithm or the run (``config.chosen_by``): set by --algos / --env, never by --set
_BY = {"algorithm": "--algos (its name: ALGO[-Robust][-RULE]-Lag[:SCHEDULE-TICK][+METHOD])", "algos": "--algos",
       "env": "--env"}  # fmt: skip
CHOSEN_ELSEWHERE = {f: _BY[by] for f, by in chosen_by().items()}


def parse_sets(sets) -> dict:
    out = {}
    for item in sets:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise PlanError(f"--set expects KEY=VALUE, got {item!r}")
        key, raw = (x.strip() for x in item.split("=", 1))
        if key in CHOSEN_ELSEWHERE:
            raise PlanError(f"--set {key}=...: {key} is chosen by {CHOSEN_ELSEWHERE[key]}, not --set")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = float(raw) if raw.lower() in ("inf", "+inf", "-inf") else raw
        if key in out:  # else the last would win without the first being checked
            raise PlanError(f"--set {key}=... is given more than once; give it once")
        out[key] = value
    return out


def plan_envs(args) -> list[str]:
    """The environments of ``--env`` (with a gymnax preset's ``--uncertain``/``--costs``)."""
    if user_code.is_source(args.env):
        return [load_user_env(args)]
    envs_ = list(ENV_NAMES) if args.env == "all" else [args.env]
    gymnax_env = args.env.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX))
    given = any(getattr(args, k, None) is not None for k in ("uncertain", "costs", "noise"))
    if given and not gymnax_env:
        raise PlanError("--uncertain, --costs and --noise apply to a gymnax environment (--env gymnax:ID; "
                        "--uncertain and --costs to a brax one too, brax:NAME)")  # fmt: skip
    if "@" in args.env and given:
        raise PlanError(f"--env {args.env} names its settings with @...: name the box and costs there too "
                        "(@uncertain=FIELD:WIDTH, @costs=...) and drop --uncertain/--costs/--noise, or give those with "
                        f"--env {args.env.partition('@')[0]}")  # fmt: skip
    if args.env.startswith(envs.BRAX_PREFIX) and getattr(args, "noise", None) is not None:
        raise PlanError("--noise applies to gymnax:ID; a brax preset's kernel noise is its own (docs/brax_envs.md)")
    for e in envs_:
        try:
            if not (gymnax_env and "@" not in e):  # gymnax:ID is checked with its --uncertain/--costs below
                envs.check_name(e)
        except ValueError as err:
            if gymnax_env or e.partition("@")[0] in ENV_NAMES:  # a spelling of a known name: its own message
                raise PlanError(f"--env {e}: {err}") from None
            from rcmdp_jax.envs.brax_presets import PRESETS as BRAX
            from rcmdp_jax.envs.gymnax_presets import PRESETS

            presets = ", ".join(envs.GYMNAX_PREFIX + k for k in PRESETS)
            brax = ", ".join(envs.BRAX_PREFIX + k for k in BRAX)
            raise PlanError(f"--env {e!r} is not allowed; choose one of: {', '.join(ENV_NAMES)}, all, "
                             f"{presets}, gymnax:ID (any gymnax id, with --uncertain), {brax}, brax:NAME (any brax "
                             "environment, with --uncertain), PACKAGE.MODULE:NAME or FILE.py:NAME (your own "
                             "environment)") from None  # fmt: skip
    if gymnax_env:  # every spelling built abstractly: each field, width and cost checked
        from rcmdp_jax.envs.gymnax_presets import check, gymnax_name

        if args.env.startswith(envs.BRAX_PREFIX):  # built for real (brax's system loads): the extra's absence is one line
            from rcmdp_jax.envs.brax_presets import brax_name as gymnax_name
            from rcmdp_jax.envs.brax_presets import check

        try:
            if "@" in args.env:
                check(args.env)
            else:
                noise = () if args.env.startswith(envs.BRAX_PREFIX) else (getattr(args, "noise", None),)
                envs_ = [gymnax_name(args.env, args.uncertain, args.costs, *noise)]
        except (ValueError, ImportError) as err:
            raise PlanError(f"--env {args.env}: {err}") from None
    return envs_


def plan_algos(args) -> list[str]:
    """The algorithm names of ``--algos`` / ``--schedules``, each one parsed."""
    if args.schedules:
        if args.algos != "all":
            raise PlanError("--schedules chooses the algorithms itself; drop --algos")
        algos = list(schedule_variants())
    else:
        algos = list(ALGORITHMS) if args.algos == "all" else [a.strip() for a in args.algos.split(",")]
    if not any(algos):
        raise PlanError("--algos is empty")
    if not all(algos):  # "PPO,,MDPO": a name left out by mistake is not dropped silently
        raise PlanError(f"--algos {args.algos!r} has an empty name between commas; separate the names by single "
                         "commas")  # fmt: skip
    repeated = sorted({a for a in algos if algos.count(a) > 1})
    if repeated:
        raise PlanError(f"--algos names {', '.join(repeated)} more than once")
    for a in algos:
        try:
            parse_algorithm(split_variant(a)[0])
        except ValueError as err:
            raise PlanError(f"--algos: {err}") from None
    return algos


def check_numbers(args) -> None:
    """``--budget``, ``--seeds``, ``--seed``, ``--steps``, ``--n-test``, ``--devices``."""
    if args.budget not in (*BUDGETS, AUTO):
        raise PlanError(f"--budget {args.budget!r} is not allowed; choose one of: {', '.join((*BUDGETS, AUTO))}")
    if args.seeds < 1:
        raise PlanError(f"--seeds must be a positive integer, got {args.seeds}")
    try:
        check_seed("--seed", args.seed)
    except ValueError as err:
        raise PlanError(str(err)) from None
    if args.steps is not None and args.steps < 1:
        raise PlanError(f"--steps must be a positive integer, got {args.steps}")
    if args.n_test is not None and args.n_test < 1:
        raise PlanError(f"--n-test must be a positive integer, got {args.n_test}")
    if args.budget == AUTO:
        from rcmdp_jax import auto_budget

        if getattr(args, "distributed", False):
            raise PlanError("--budget auto searches in one process: drop --distributed, or give --steps N")
        try:
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


def check_before_processes(args) -> None:
    """``--distributed``: what can be checked before joining the other processes (importing
    gymnax starts JAX's backend, which must wait for the handshake): the numbers, the
    algorithm names, the ``--set`` fields and every hyperparameter. The rest follows."""
    plan_algos(args)
    check_numbers(args)
    overrides = {k: v for k, v in parse_sets(args.sets).items() if k not in CHOSEN_ELSEWHERE}
    try:
        with np.errstate(all="ignore"):
            validate_hparams(Config().replace(**overrides).hparams)
    except (ValueError, TypeError) as err:
        raise PlanError(f"--set: {err}") from None


def check_distinct(configs: dict) -> None:
    """Two names of ``--algos`` for one configuration (``MDPO-Lag@lr=1e-3`` and
    ``MDPO-Lag@lr=0.001``) would train the same lanes twice."""
    seen: dict = {}
    for algo, cfg in configs.items():  # a plug-in number none of its plug-ins reads changes nothing it trains
        unread = set(cfg.hparams.plugin_names) - options.numbers_read(cfg)
        d = config_to_dict(dataclasses.replace(cfg, name=""))
        d["hparams"] = {k: v for k, v in d["hparams"].items() if k not in unread}
        key = json.dumps(d, sort_keys=True, default=str)
        if key in seen:
            raise PlanError(f"--algos: {seen[key]} and {algo} are the same configuration; name it once")
        seen[key] = algo


def own_budget_note(env: str, budget: str) -> str:
    """A note where ``env`` has no budget of that name (``quick`` runs the short one there)."""
    budgets = envs.spec(env).learner.budgets
    if budget in budgets:
        return ""
    return f"note: --budget {budget}: {env} has no {budget} budget of its own; it runs its short one ({budgets['short']:,} steps)"


def _blamed(env: str, algo: str, budget: str) -> str:
    """The option a refused config comes from: ``--algos NAME`` when the name's own
    ``@FIELD=VALUE`` is refused without any ``--set``, else ``--set``."""
    if "@" in algo:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                preset(env, algo, budget)
        except (ValueError, TypeError):
            return f"--algos {algo}"
    return "--set"


def check_plugins_env(env: str, algo: str, cfg: Config) -> None:
    """Each plug-in of ``cfg`` refuses an environment it cannot run (``options.check_env``:
    LTMA's score gradient on brax's deterministic physics, corners beyond 8 parameters) now,
    not when the family compiles; a gymnax environment is built abstractly."""
    def check():
        options.check_env(cfg, envs.make(env)[0], adversary.family_methods([cfg]))
        return 0

    try:
        jax.eval_shape(check) if env.startswith(envs.GYMNAX_PREFIX) else check()
    except ValueError as err:
        raise PlanError(f"--algos {algo} on --env {env}: {err}") from None


def build_plan(args) -> Plan:
    """Validate every input and build all configs; raises ``PlanError``. Compiles nothing."""
    envs_, algos = plan_envs(args), plan_algos(args)
    algos = keep_constrained(args, envs_, algos)
    try:
        user_code.check_folder_names(algos)
    except ValueError as err:
        raise PlanError(f"--algos: {err}") from None
    check_numbers(args)
    overrides = parse_sets(args.sets)
    if args.steps is not None:
        if "total_timesteps" in overrides:
            raise PlanError("--steps and --set total_timesteps=... both set the budget; give one")
        overrides["total_timesteps"] = args.steps
    budget = "short" if args.budget == AUTO else args.budget  # auto: the presets' other settings, the cap's steps
    if args.budget == AUTO and "total_timesteps" not in overrides:
        from rcmdp_jax.auto_budget import DEFAULT_CAP

        overrides["total_timesteps"] = DEFAULT_CAP
    configs, will_run, built, notes = {}, {}, {}, []
    for e in envs_:
        configs[e], will_run[e], built[e] = {}, {}, {}
        for a in algos:
            try:
                with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
                    # a rounded budget: said below as a note; a value beyond float32 is refused in words
                    warnings.simplefilter("always", BudgetRounded)
                    cfg = built[e][a] = preset(e, a, budget, **overrides)
            except (ValueError, TypeError) as err:
                steps = args.steps is not None and str(err).startswith("total_timesteps")  # --steps set it
                where = "--steps" if steps else _blamed(e, a, budget)
                if where == "--set" and not args.sets:  # no --set given: the environment's own settings
                    where = f"--env {args.env}"
                raise PlanError(f"{where}: {err}") from None
            if args.n_test is not None and "margin_n" not in overrides and float(cfg.hparams.margin_z):
                cfg = built[e][a] = cfg.replace(margin_n=float(args.n_test))  # the data margin, for the run's test
            check_counts(cfg, f"{a} on {e}")
            check_plugins_env(e, a, cfg)
            rounded = [w for w in caught if issubclass(w.category, BudgetRounded)]
            for w in caught:  # any other warning as it was
                if w not in rounded:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if args.steps is None and rounded:
                notes.append(f"note: --set {rounded[0].message} on {e}")
            if args.steps is not None and cfg.num_iterations * cfg.batch_size != args.steps and not cfg.episodic:
                notes.append(f"note: --steps {args.steps}: {a} on {e} runs {cfg.num_iterations} iteration(s) of "
                             f"{cfg.batch_size} policy steps = {cfg.num_iterations * cfg.batch_size} steps")  # fmt: skip
            # as run.json records it: a fresh run and its --resume train one config
            configs[e][a] = config_from_dict(config_to_dict(cfg))
            will_run[e][a] = will_run_of(cfg)
        check_distinct(built[e])
        if args.steps is None and "total_timesteps" not in overrides and (said := own_budget_note(e, budget)):
            notes.append(said)
    notes += unmeasured_budget_notes(envs_, args)
    check_memory(built, args.seeds, args.n_test)
    steps = args.seeds * sum(r["policy_steps"] for w in will_run.values() for r in w.values())
    if steps > LONG_RUN:
        notes.append(f"note: {steps:,} policy steps in all ({args.seeds} seed(s)); at the ~50,000 steps/s of a 2-core "
                     f"CPU that is about {steps / 5e4 / 3600:.1f} h (progress is printed per family)")  # fmt: skip
    for note in notes:  # after every check: a refusal is one line
        print(note, file=sys.stderr)
    return Plan(envs=tuple(envs_), algos=tuple(algos), seeds=args.seeds, seed=args.seed, vmap=args.vmap,
                n_test=args.n_test, worst_case=args.worst_case, devices=args.devices, configs=configs,
                will_run=will_run, env_sources=user_code.sources(envs_), env_descriptions=user_code.descriptions(envs_),
                plugins=tuple(user_code.loaded_plugins()))  # fmt: skip


# --- environments outside the study ---
def load_user_env(args) -> str:
    """``--env PACKAGE.MODULE:NAME`` / ``FILE.py:NAME``: the user's environment, loaded and
    registered (its source goes into run.json)."""
    if any(getattr(args, k, None) is not None for k in ("uncertain", "costs", "noise")):
        raise PlanError(f"--uncertain, --costs and --noise apply to a gymnax environment (--env gymnax:ID); "
                         f"{args.env} brings its own box, costs and noise")  # fmt: skip
    try:
        return user_code.load_spec(args.env)[0]
    except ValueError as err:
        raise PlanError(f"--env {args.env}: {err}") from None


def keep_constrained(args, envs_: list[str], algos: list[str]) -> list[str]:
    """An environment without constraint costs (a gymnax id named without --costs) runs
    the unconstrained algorithms only: ``--algos all`` is cut to them, a named
    constrained algorithm is refused."""
    bare = [e for e in envs_ if e.startswith((envs.GYMNAX_PREFIX, envs.BRAX_PREFIX)) and not envs.gymnax_has_costs(e)]
    if not bare:
        return algos
    constrained = [a for a in algos if parse_algorithm(split_variant(a)[0])[1] != "none"]
    if constrained and args.algos != "all":
        raise PlanError(f"--env {args.env} has no constraint costs, so {', '.join(constrained)} cannot run; give "
                         "--costs FIELD:LIMIT,... or choose unconstrained algorithms (MCPMD, PPO, MDPO, RMCPMD, "
                         "PPO-Robust, MDPO-Robust)")  # fmt: skip
    if constrained:
        print(f"note: --env {args.env} has no constraint costs (--costs): the {len(algos) - len(constrained)} "
              "unconstrained algorithms run", file=sys.stderr)  # fmt: skip
    return [a for a in algos if a not in constrained]


def unmeasured_budget_notes(envs_, args) -> list[str]:
    """A line for each environment that trains at a budget nobody measured (``LearnerSpec``'s
    defaults: a user's own, an id without a preset; a study domain at a limit the rule was not run
    at), and for a study domain at another limit that trains at the budget the rule measured there."""
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


# --- --budget auto: the budget rule while training (rcmdp_jax.auto_budget) ---
AUTO = "auto"


def with_budgets(plan: Plan, budgets: dict[str, int]) -> Plan:
    """``plan`` with every algorithm on environment ``env`` at ``budgets[env]`` policy steps."""
    with warnings.catch_warnings():  # a budget whole batches round up: the search's lines say the budget
        warnings.simplefilter("ignore", BudgetRounded)
        configs = {e: {a: c.replace(total_timesteps=int(budgets[e])) if e in budgets else c for a, c in cs.items()}
                   for e, cs in plan.configs.items()}  # fmt: skip
    will_run = {e: {a: will_run_of(c) for a, c in cs.items()} for e, cs in configs.items()}
    return dataclasses.replace(plan, configs=configs, will_run=will_run)


def load_plugins(args) -> None:
    """``--plugins`` imported before anything reads the registries; with ``--resume`` the run
    folder's own first (its run.json's ``plugins``), so the command need not name them again."""
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
        user_code.load_plugin_specs(args.plugins)
    except ValueError as err:
        raise PlanError(str(err)) from None
