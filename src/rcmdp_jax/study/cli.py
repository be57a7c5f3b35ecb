"""The command line of the main job (``experiments/run.py``): arguments, the checks that
come before anything is compiled or written (exit 2), and the sequence plan -> run
folder -> devices -> study. ``rcmdp_jax.study.cli.main(argv)`` is this function.

    python experiments/run.py --seeds 10 --vmap
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
from pathlib import Path

import jax

from rcmdp_jax.envs import ENV_NAMES
from rcmdp_jax.study import runtime
from rcmdp_jax.study.notes import say_before_training
from rcmdp_jax.study.plan import (
    AUTO,
    build_plan,
    check_before_processes,
    check_devices,
    load_plugins,
    with_budgets,
)
from rcmdp_jax.study.run_folder import RunFolder, write_text
from rcmdp_jax.study.run_plan import Plan, PlanError, RunFolderError
from rcmdp_jax.study.runtime import program_name
from rcmdp_jax.study.training_log import event_files


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2, nothing written."""


# what the command line reports in one line with exit status 2
REFUSED = (UsageError, PlanError, RunFolderError)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line (no usage block), exit 2 like every bad input
        raise UsageError(f"{message} (see --help)")


def parse_args(argv):
    """The command's options; ``given``: the names of those the command line gives (``--resume``
    takes the others from the run folder's run.json, ``resumed_plan``)."""
    args = parser().parse_args(argv)
    quiet = parser()
    for action in quiet._actions:  # only what the command line gives is set
        action.default = argparse.SUPPRESS
    args.given = set(vars(quiet.parse_args(argv)))
    return args


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=program_name(),
        description="Train robust-constrained RL algorithms and run the robustness test. Also: "
        "'rcmdp report RUN_DIR' (rewrite a run folder's tables and plots), 'rcmdp feasibility --env ...' "
        "(whether each constraint can be kept on the box at all; 'rcmdp feasibility --help') and 'rcmdp eval RUN_DIR "
        "--algo NAME --seed S --kernel FIELD=+20%' (a trained policy on one kernel; 'rcmdp eval --help').",
    )
    _what_to_run(p)
    _how_to_run(p)
    return p


def _what_to_run(p) -> None:
    """Environments, algorithms, budget, seeds, settings."""
    p.add_argument(
        "--env",
        default="cartpole",
        help=f"one of {', '.join(ENV_NAMES)}, 'all' (the three; default cartpole), NAME@FIELD=X for one with its "
        "constraint's limit X (cartpole@velocity_limit=0.2, inventory@cost_threshold=0.13); gymnax:ID, a gymnax preset "
        "(CartPole-v1, Pendulum-v1, Acrobot-v1, MountainCarContinuous-v0) or any other gymnax id with --uncertain; "
        "brax:NAME, a brax environment (the extra brax; presets inverted_pendulum, inverted_double_pendulum, hopper, "
        "halfcheetah; docs/brax_envs.md); or your own environment, PACKAGE.MODULE:NAME or FILE.py:NAME (docs/custom_envs.md)",
    )
    p.add_argument(
        "--uncertain",
        default=None,
        metavar="FIELD=WIDTH,...",
        help="gymnax:ID: the uncertain EnvParams fields and their box half-widths, relative "
        "(g=0.2: ±20%%) or absolute (g=abs:1.5); brax:NAME: the system's fields (pole_mass=0.3, friction=0.2, "
        "damping, gear); replaces the preset's box",
    )
    p.add_argument("--costs", default=None, metavar="NAME,...",
                   help="gymnax:ID: the preset's costs to keep (default: its first) and/or FIELD:LIMIT, the "
                        "constraint |next state's FIELD| <= LIMIT (LIMIT >= 0; a vector field: its largest entry), "
                        "kept when its discounted sum is <= 0 (docs/method.md), or 'FIELD>LIMIT:BUDGET' (quoted), 1 per "
                        "step with |FIELD| > LIMIT and a budget of BUDGET such steps per episode (their count at most "
                        "BUDGET; 'FIELD>LIMIT:BUDGET:GAMMA_C' discounts them by GAMMA_C, or 'gamma' for the "
                        "return's) "
                        "(docs/method.md); brax:NAME: speed:LIMIT or Safety-Gymnasium's velocity:LIMIT[:BUDGET]; an id "
                        "without a preset and without --costs runs the unconstrained algorithms only")  # fmt: skip
    p.add_argument("--noise", default=None, metavar="STD,...",
                   help="gymnax:ID: the kernel's std (s' ~ Normal(gymnax's step, std^2) on each float state entry), "
                        "one number or one per state entry; default the preset's, 1e-3 for an id without a preset")  # fmt: skip
    p.add_argument(
        "--algos",
        default="all",
        help="comma-separated algorithm names (docs/method.md §2), or 'all' (default); a name may carry hyperparameters, "
        "e.g. MDPO-Lag@lam_init=0 (lanes of the same compiled program), or an alpha "
        "schedule variant, e.g. MDPO-Robust-Lag:restart-batch",
    )
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...",
                   help="your own learners, constraint rules, robust methods or environments: a file or module that "
                        "registers them when imported (repeatable or comma-separated); recorded in run.json, so "
                        "--resume, --eval-only and 'rcmdp report' load it again (docs/design.md)")  # fmt: skip
    p.add_argument(
        "--schedules",
        action="store_true",
        help="the schedules study: MDPO-Robust, MDPO-Robust-Lag and MDPO-Robust-Augmented-Lag under every "
        "alpha schedule ticking per epoch and per batch (one compiled program); replaces --algos",
    )
    p.add_argument("--budget", default="short", help="short|long|quick|auto: the environment's number of policy steps (short: "
                   "the default; the converged budget where docs/budgets.md measured one; the study's domains: "
                   "docs/method.md §3; quick: a first look); auto: the budget rule read while the plain -Lag learner "
                   "trains, up to --steps (default 1,600,000), then every algorithm at the budget it found "
                   "(docs/budgets.md)")
    p.add_argument("--steps", type=int, default=None, help="policy steps per run (overrides --budget; with --budget "
                   "auto, the cap of its search)")
    p.add_argument("--seeds", type=int, default=10, help="number of seeds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument(
        "--vmap", dest="vmap", action="store_true", default=True, help="all seeds in one vmapped call (default)"
    )
    p.add_argument("--no-vmap", dest="vmap", action="store_false", help="a Python loop over seeds (for comparison)")


def _how_to_run(p) -> None:
    """Output, testing, resuming, devices, processes, cache."""
    p.add_argument("--out", default=None, help="run folder (default runs/<timestamp>); never overwritten")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any Config/HParams field or plug-in option, e.g. --set eta_xi=1e-6, --set "
        "adversary_candidates=8 (repeatable)",
    )
    p.add_argument("--n-test", type=int, default=None, help="episodes per test kernel (default: the preset's; the "
                   "study's domains docs/method.md §4, gymnax presets 20, Pendulum-v1 100); outside the study it also "
                   "sizes the data margin the constraints train with, 2 sigma_j / sqrt(N) (docs/method.md §2a.4)")
    p.add_argument("--worst-case", nargs="?", const="all", default=None, choices=("all", "costs"),
                   help="after the grid, search the uncertainty box for each seed's worst kernel by projected "
                        "gradient steps (rcmdp_jax.worst_case); adds a grid-vs-search table. 'all' (the default): "
                        "the lowest return, the lowest R_pen and each constraint's highest C; 'costs': only the "
                        "constraints' (a third of the time with one constraint)")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished algorithms")
    p.add_argument(
        "--eval-only", metavar="RUN_DIR", default=None, help="re-run the sweep of RUN_DIR from its checkpoints"
    )
    p.add_argument(
        "--devices",
        default="auto",
        help="'auto' (default: on a CPU one XLA device per core, else all devices), 'all' or N: "
        "shard the seeds across them",
    )
    p.add_argument(
        "--distributed",
        action="store_true",
        help="one of several processes (jax.distributed): each trains its share of the seeds, process 0 "
        "writes the run folder; under SLURM or Open MPI the next three options are found automatically",
    )
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="--distributed: the coordinator (process 0) address (default: JAX_COORDINATOR_ADDRESS or "
                        "the cluster's)")  # fmt: skip
    p.add_argument("--num-processes", type=int, default=None, help="--distributed: how many processes")
    p.add_argument("--process-id", type=int, default=None, help="--distributed: this process's index, 0 .. N-1")
    p.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR|off",
        help="persistent XLA compilation cache: a re-run compiles nothing (default: JAX's own setting "
        "(JAX_COMPILATION_CACHE_DIR) if it has one, else ~/.cache/rcmdp_jax/xla)",
    )
    p.add_argument("--plots", default="on", choices=("on", "off"),
                   help="on (default): the report's figures; off: tables only, for quick or headless runs "
                        "(docs/cli.md), and the figures an earlier report drew in an environment's folder "
                        "(test_return.png, test_cost_<J>.png, train_curves.png, intervals.png, profiles.png) "
                        "are deleted and named; 'rcmdp report RUN_DIR' draws them again")  # fmt: skip
    p.add_argument("--tensorboard", default="auto", choices=("auto", "on", "off"),
                   help="TensorBoard event files of the training metrics in each algorithm's folder "
                        "(tensorboard/seed_S/; tensorboard --logdir RUN_DIR), written after each training chunk "
                        "beside train_metrics.csv (always written): auto (default) when tensorboardX is installed "
                        "(the extra tensorboard), on (refused without it), off")  # fmt: skip


# the options --eval-only does not use (it takes the run folder's plan as it is)
EVAL_ONLY_UNUSED = ("env", "uncertain", "costs", "noise", "algos", "plugins", "schedules", "budget", "steps", "seeds", "seed",
                    "vmap", "out", "sets", "resume", "tensorboard")  # fmt: skip


def anchor_paths(args):
    """``--out`` and ``--eval-only`` as absolute paths, and the folder ``runs/`` is in, taken
    now: a user module that changes the working directory as it loads (``--env
    FILE.py:NAME``) cannot move the run folder."""
    args.cwd = Path.cwd()
    for name in ("out", "eval_only"):
        if (value := getattr(args, name)) is not None and value.strip():
            setattr(args, name, str(args.cwd / value))
    return args


def new_plan(args) -> Plan | None:
    """Every input of a training command checked and its plan built (nothing started
    yet, not even the other processes of ``--distributed``); None for ``--eval-only``."""
    runtime.check_compile_cache(args.compile_cache)
    args.event_files, args.event_note = event_files(args.tensorboard)
    if args.eval_only:
        check_devices(args)
        return None
    if args.out is not None and not args.out.strip():
        raise UsageError("--out is empty; name a run folder (or leave --out out for runs/<timestamp>)")
    load_plugins(args)
    if args.distributed:  # the plan is built after the handshake (gymnax's import starts JAX's backend)
        check_before_processes(args)
        return None
    return resumed_plan(args) or built_plan(args)


# --resume: the options run.json records as they are (``SAVED``), and those that build its configs
SAVED = ("seeds", "seed", "n_test", "vmap", "worst_case")
BUILT = ("env", "uncertain", "costs", "noise", "algos", "schedules", "budget", "steps", "sets")


def resumed_plan(args) -> Plan | None:
    """``--resume`` of a run folder: the options the command leaves out are the run's
    (run.json), so ``--resume --out DIR`` alone continues it; an option given must agree
    (``plan_and_folder``). The saved plan with the given ``SAVED`` options when the command
    gives none that builds configs (``BUILT``); else None, and ``build_plan`` builds it from
    ``args`` with the run's environments, algorithms and (none of ``--budget``, ``--steps``,
    ``--set`` given) configs."""
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
    if not args.given & {"budget", "steps", "sets"}:
        args.saved_configs = saved
    return None


def built_plan(args) -> Plan:
    """``build_plan``, with a resumed run's configs where the command gives none (``resumed_plan``)."""
    plan = build_plan(args)
    saved = getattr(args, "saved_configs", None)
    return plan if saved is None else dataclasses.replace(plan, configs=saved.configs, will_run=saved.will_run)


def plan_and_folder(args, plan: Plan | None, first: bool) -> tuple[Plan, RunFolder]:
    """The plan this command runs and its run folder: a saved one (``--eval-only``,
    ``--resume``, checked against this command) or a new one (not written yet)."""
    if args.eval_only:
        defaults = parse_args([])
        unused = [f"--{k.replace('_', '-')}" for k in EVAL_ONLY_UNUSED if getattr(args, k) != getattr(defaults, k)]
        if unused:
            raise UsageError(f"--eval-only reruns the sweep of a run folder as it was trained; it does not use "
                             f"{', '.join(unused).replace('--sets', '--set')}: drop it, or train into a new --out")  # fmt: skip
        folder = RunFolder(args.eval_only)
        plan = folder.open("--eval-only", results=False)  # the results it re-creates
        if args.n_test is not None and args.n_test != plan.n_test:
            raise UsageError(
                f"--eval-only reruns the sweep of {folder.root} as it was run (--n-test {plan.n_test or 'default'}); "
                "to test with another --n-test, train into a new --out"
            )
        return plan, folder
    plan = plan or resumed_plan(args) or built_plan(args)
    folder = RunFolder(args.out if args.out else args.cwd / "runs" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    if args.resume:
        saved = folder.open("--resume")
        if args.budget == AUTO:  # the budgets its search found, not the search's cap
            plan = with_budgets(plan, searched_budgets(folder, plan))
        if differ := saved.differences(plan):
            raise UsageError(
                f"--resume: the options differ from the run in {folder.root} ({', '.join(differ)}); use the same options"
            )
        return saved, folder
    if first and folder.exists("--out") and not folder.root.is_dir():
        raise UsageError(f"--out {folder.root} is a file, not a folder; choose another --out")
    if first and folder.exists("--out"):
        raise UsageError(
            f"output folder {folder.root} already exists; use --resume to continue it or choose another --out"
        )
    return plan, folder


def searched_budgets(folder: RunFolder, plan: Plan) -> dict[str, int]:
    """``--resume --budget auto``: the budgets the run's own search found (``budget_auto.json``), if
    it searched as this command would (the same cap); else ``UsageError``."""
    path = folder.root / "budget_auto.json"
    try:
        record = json.loads(path.read_text())
        found = {e: [(f["converged"], int(f["cap"])) for f in record[e].values()] for e in plan.envs}
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--resume --budget auto: {folder.root} was not trained with --budget auto (no readable "
                         f"{path.name}); resume it with the options it was started with, or --resume --out "
                         f"{folder.root} alone") from None  # fmt: skip
    budgets = {}
    for e, rows in found.items():
        cap = next(iter(plan.configs[e].values())).total_timesteps
        if any(c != cap for _, c in rows):
            raise UsageError(f"--resume --budget auto: the run in {folder.root} searched up to {rows[0][1]:,} policy "
                             f"steps on {e}, this command up to {cap:,} (--steps); use the same options")  # fmt: skip
        budgets[e] = max(int(n or c) for n, c in rows)
    return budgets


def searched_plan(plan: Plan, folder: RunFolder) -> Plan:
    """``--budget auto``: the plan at the budgets the rule found (``auto_budget.search_envs``), its run
    folder created with them and what decided them (``budget_auto.json``)."""
    from rcmdp_jax.auto_budget import search_envs

    keys = jax.random.split(jax.random.PRNGKey(plan.seed), plan.seeds)  # the run's own seeds (the Study's)
    budgets, found = search_envs(plan.configs, keys, report=lambda line: print(line, flush=True))
    plan = with_budgets(plan, budgets)
    folder.create(plan)
    record = {e: {lr: {"converged": f.converged, "reached": f.reached, "cap": f.cap, "why": f.why(),
                       "table": {str(n): {k: list(v) for k, v in row.items()} for n, row in f.table.items()}}
                  for lr, f in by.items()} for e, by in found.items()}  # fmt: skip
    write_text(folder.root / "budget_auto.json", json.dumps(record, indent=1) + "\n")
    return plan


def main(argv=None) -> int:
    from rcmdp_jax.study.orchestrate import Study

    split_note = ""
    try:
        args = anchor_paths(parse_args(sys.argv[1:] if argv is None else argv))
        split_note = runtime.split_in_process(args.devices, args.seeds) if not args.distributed else ""  # before any JAX work
        plan = new_plan(args)  # before --distributed's handshake: bad input never waits for the others
        first = runtime.start_processes(args)  # the process that checks and writes the run folder
        plan, folder = plan_and_folder(args, plan, first)
        mesh = runtime.mesh_of(args)
        auto = args.budget == AUTO and not args.eval_only and not args.resume  # the folder after the search
        if not args.eval_only and not args.resume and first and not auto:
            folder.create(plan)
        release = folder.lock() if first and not auto else (lambda: None)
    except REFUSED as err:
        print(f"{program_name()}: error: {err}", file=sys.stderr)
        return 2
    runtime.speed_up(args.compile_cache)
    if auto:
        try:
            plan = searched_plan(plan, folder)
        except KeyboardInterrupt:
            print(f"{program_name()}: interrupted during --budget auto's search; nothing was written", file=sys.stderr)
            return 130
        release = folder.lock()
    say_before_training(args, plan, folder, mesh, first, split_note)
    try:
        with runtime.ctrl_c_exits(folder.root, release, again=runtime.resume_command(folder.root)):
            study = Study(plan, folder, args.resume, bool(args.eval_only), mesh, args.worst_case, args.plots == "on",
                          args.event_files)
            return study.run()
    except RunFolderError as err:  # a run.json that does not match its checkpoints
        print(f"{program_name()}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a folder that is not ours: one line, nothing half-written kept
        again = f"--eval-only {folder.root} again" if args.eval_only else runtime.resume_command(folder.root)
        print(f"{program_name()}: error: {runtime.os_error(err, folder.root)}; finished algorithms are saved, continue with {again}",
              file=sys.stderr)  # fmt: skip
        return 2
    finally:
        release()
