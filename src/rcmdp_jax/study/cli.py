"""The command line of the main job (``experiments/run.py``): arguments, the checks that
come before anything is compiled or written (exit 2), and the sequence plan -> run
folder -> devices -> study. ``rcmdp_jax.study.cli.main(argv)`` is this function.

    python experiments/run.py --seeds 10 --vmap
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import jax

from rcmdp_jax.envs.domain import BUDGETS
from rcmdp_jax.study import runtime
from rcmdp_jax.study.commands import Parser, UsageError, refuse
from rcmdp_jax.study.notes import say_before_training
from rcmdp_jax.study.plan import AUTO, build_plan, new_plan, resumed_plan, with_budgets
from rcmdp_jax.study.run_folder import RunFolder, write_text
from rcmdp_jax.study.run_plan import Plan, PlanError, RunFolderError
from rcmdp_jax.study.runtime import program_name
from rcmdp_jax.study.training_log import event_files

# what the command line reports in one line with exit status 2
REFUSED = (UsageError, PlanError, RunFolderError)


def parse_args(argv):
    """The command's options, ``--out`` and ``--eval-only`` as absolute paths and the folder
    ``runs/`` is in (``cwd``) taken now: a user module that changes the working directory as it
    loads (``--env FILE.py:NAME``) cannot move the run folder. ``given``: the options the command
    line gives (``--resume`` takes the others from the run folder's run.json, ``resumed_plan``)."""
    args, quiet = parser().parse_args(argv), parser()
    for action in quiet._actions:  # only what the command line gives is set
        action.default = argparse.SUPPRESS
    args.given, args.cwd = set(vars(quiet.parse_args(argv))), Path.cwd()
    for name in ("out", "eval_only"):
        if (value := getattr(args, name)) is not None and value.strip():
            setattr(args, name, str(args.cwd / value))
    return args


def environment_options(p: argparse.ArgumentParser) -> None:
    """``--env`` with a gymnax or brax environment's ``--uncertain``, ``--costs`` and ``--noise``,
    ``--plugins`` and ``--seed``: the training command's and ``rcmdp feasibility``'s (docs/cli.md)."""
    p.add_argument("--env", default="cartpole", help="cartpole (default), inventory, inventory3d or 'all' (training "
                   "only), NAME@FIELD=X (the constraint's limit X), gymnax:ID, brax:NAME, or your own environment, "
                   "PACKAGE.MODULE:NAME or FILE.py:NAME (docs/custom_envs.md)")  # fmt: skip
    p.add_argument("--uncertain", metavar="FIELD=WIDTH,...", help="gymnax:ID / brax:NAME: the uncertain fields and "
                   "their box half-widths, relative (g=0.2: ±20%%) or absolute (g=abs:1.5); replaces the preset's box")
    p.add_argument("--costs", metavar="NAME,...", help="gymnax:ID / brax:NAME: the preset's costs to keep, "
                   "FIELD:LIMIT (|FIELD| <= LIMIT) or 'FIELD>LIMIT:BUDGET[:GAMMA_C]' (unsafe steps per episode); "
                   "an id without costs runs the unconstrained algorithms only (docs/cli.md)")  # fmt: skip
    p.add_argument("--noise", metavar="STD,...", help="gymnax:ID: the kernel's std on each float state entry (one, "
                   "or one per entry; default the preset's, else 1e-3)")
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...", help="files or modules "
                   "that register your learners, rules, robust methods or environments (repeatable; recorded in "
                   "run.json, loaded again by --resume, --eval-only and 'rcmdp report')")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")


def parser() -> argparse.ArgumentParser:
    """The options (what each does: docs/cli.md)."""
    p = Parser(prog=program_name(), description="Train robust-constrained RL algorithms and run the robustness test. "
               "Also: 'rcmdp report RUN_DIR' (rewrite a run folder's tables and plots), 'rcmdp feasibility --env ...' "
               "(whether each constraint can be kept on the box at all) and 'rcmdp eval RUN_DIR --algo NAME --seed S "
               "--kernel FIELD=+20%' (a trained policy on one kernel); each has its --help.")  # fmt: skip
    environment_options(p)
    add = p.add_argument
    add("--algos", default="all", help="comma-separated algorithm names (docs/method.md §2) or 'all' (default); "
        "NAME@FIELD=X sets a hyperparameter (lanes of one program), NAME:SCHEDULE-TICK an alpha schedule")
    add("--schedules", action="store_true", help="the schedules study: the MDPO-Robust algorithms under every alpha "
        "schedule (one compiled program); replaces --algos")
    add("--budget", default="short", choices=(*BUDGETS, AUTO), help="the environment's number of policy steps "
        "(default short); auto: the budget rule read while the plain -Lag learner trains, up to --steps "
        "(docs/budgets.md)")  # fmt: skip
    add("--steps", type=int, help="policy steps per run (overrides --budget; with --budget auto, its cap)")
    add("--seeds", type=int, default=10, help="number of seeds (default 10)")
    add("--vmap", action="store_true", default=True, help="all seeds in one vmapped call (default)")
    add("--no-vmap", dest="vmap", action="store_false", help="a Python loop over seeds (for comparison)")
    add("--out", help="run folder (default runs/<timestamp>); never overwritten")
    add("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="override any Config/HParams "
        "field or plug-in option, e.g. --set eta_xi=1e-6, --set adversary_candidates=8 (repeatable)")
    add("--n-test", type=int, help="episodes per test kernel (default the preset's); outside the study also the "
        "data margin's N (docs/method.md §2a.4)")
    add("--worst-case", nargs="?", const="all", choices=("all", "costs"), help="after the grid, search the box for "
        "each seed's worst kernel: 'all' (default) the return's, R_pen's and each constraint's; 'costs' the "
        "constraints' only")  # fmt: skip
    add("--resume", action="store_true", help="continue the run in --out, skipping finished algorithms")
    add("--eval-only", metavar="RUN_DIR", help="re-run the sweep of RUN_DIR from its checkpoints")
    add("--devices", default="auto", help="'auto' (default: one XLA device per CPU core, else all devices), 'all' or "
        "N: shard the seeds across them")
    add("--distributed", action="store_true", help="one of several processes (jax.distributed), each training its "
        "share of the seeds; under SLURM or Open MPI the next three are found automatically")
    add("--coordinator", metavar="HOST:PORT", help="--distributed: process 0's address")
    add("--num-processes", type=int, help="--distributed: how many processes")
    add("--process-id", type=int, help="--distributed: this process's index, 0 .. N-1")
    add("--compile-cache", metavar="DIR|off", help="persistent XLA compilation cache (default JAX's setting, else "
        "~/.cache/rcmdp_jax/xla)")
    add("--plots", default="on", choices=("on", "off"), help="on (default): the report's figures; off: tables only "
        "(an earlier report's figures are deleted)")
    add("--tensorboard", default="auto", choices=("auto", "on", "off"), help="TensorBoard event files beside "
        "train_metrics.csv: auto (default) when tensorboardX is installed, on, off")
    return p


# the options --eval-only does not use (it takes the run folder's plan as it is)
EVAL_ONLY_UNUSED = ("env", "uncertain", "costs", "noise", "algos", "plugins", "schedules", "budget", "steps", "seeds",
                    "seed", "vmap", "out", "sets", "resume", "tensorboard")  # fmt: skip


def plan_and_folder(args, plan: Plan | None, first: bool) -> tuple[Plan, RunFolder]:
    """The plan this command runs and its run folder: a saved one (``--eval-only``,
    ``--resume``, checked against this command) or a new one (not written yet)."""
    if args.eval_only:
        unused = [f"--{k.replace('_', '-')}".replace("--sets", "--set") for k in EVAL_ONLY_UNUSED if k in args.given]
        if unused:
            raise UsageError(f"--eval-only reruns the sweep of a run folder as it was trained; it does not use "
                             f"{', '.join(unused)}: drop it, or train into a new --out")  # fmt: skip
        folder = RunFolder(args.eval_only)
        plan = folder.open("--eval-only", results=False)  # the results it re-creates
        if args.n_test is not None and args.n_test != plan.n_test:
            raise UsageError(f"--eval-only reruns the sweep of {folder.root} as it was run (--n-test "
                             f"{plan.n_test or 'default'}); to test with another --n-test, train into a new --out")
        return plan, folder
    plan = plan or resumed_plan(args) or build_plan(args)
    folder = RunFolder(args.out if args.out else args.cwd / "runs" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    if args.resume:
        saved = folder.open("--resume")
        if args.budget == AUTO:  # the budgets its search found, not the search's cap
            plan = with_budgets(plan, searched_budgets(folder, plan))
        if differ := saved.differences(plan):
            raise UsageError(f"--resume: the options differ from the run in {folder.root} ({', '.join(differ)}); use "
                             "the same options")  # fmt: skip
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
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if not args.distributed:  # before any JAX work
            split_note = runtime.split_in_process(args.devices, args.seeds)
        runtime.check_compile_cache(args.compile_cache)
        args.event_files, args.event_note = event_files(args.tensorboard)
        plan = new_plan(args)  # before --distributed's handshake: bad input never waits for the others
        first = runtime.start_processes(args)  # the process that checks and writes the run folder
        plan, folder = plan_and_folder(args, plan, first)
        mesh = runtime.mesh_of(args)
        auto = args.budget == AUTO and not args.eval_only and not args.resume  # the folder after the search
        if not args.eval_only and not args.resume and first and not auto:
            folder.create(plan)
        release = folder.lock() if first and not auto else (lambda: None)
    except REFUSED as err:
        return refuse(program_name(), str(err))
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
        return refuse(program_name(), str(err))
    except OSError as err:  # a full disk, a folder that is not ours: one line, nothing half-written kept
        again = f"--eval-only {folder.root} again" if args.eval_only else runtime.resume_command(folder.root)
        return refuse(program_name(), f"{runtime.os_error(err, folder.root)}; finished algorithms are saved, continue "
                      f"with {again}")  # fmt: skip
    finally:
        release()
