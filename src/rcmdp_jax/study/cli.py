"""The training command (``rcmdp``, ``experiments/run.py``): its options, the checks before
anything compiles or is written (exit 2), then plan -> run folder -> devices -> study."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
from pathlib import Path

import jax

from rcmdp_jax.atomic import write_text
from rcmdp_jax.auto_budget import search_envs
from rcmdp_jax.envs.domain import BUDGETS
from rcmdp_jax.study import runtime
from rcmdp_jax.study.commands import Parser, refuse, signals_exit
from rcmdp_jax.study.notes import say_before_training
from rcmdp_jax.study.plan import AUTO, build_plan, new_plan, resumed_plan, with_budgets
from rcmdp_jax.study.run_folder import DamagedFile, RunFolder, take
from rcmdp_jax.study.run_plan import Plan, PlanError, RunFolderError
from rcmdp_jax.study.runtime import program_name


def parse_args(argv):
    """The options (``--out``, ``--eval-only`` absolute: a user's module may move the working directory), ``given``."""
    args, quiet = parser().parse_args(argv), parser()
    for action in quiet._actions:  # only what the command line gives is set
        action.default = argparse.SUPPRESS
    args.given, args.cwd = set(vars(quiet.parse_args(argv))), Path.cwd()
    for name in ("out", "eval_only"):
        if (value := getattr(args, name)) is not None and value.strip():
            setattr(args, name, str(args.cwd / value))
    return args


def environment_options(p: argparse.ArgumentParser) -> None:
    """``--env`` and its options, ``--plugins`` and ``--seed``: training's and ``rcmdp feasibility``'s."""
    p.add_argument("--env", default="cartpole", help="cartpole (default), inventory, inventory3d, 'all', NAME@FIELD=X, "
                   "gymnax:ID, brax:NAME, PACKAGE.MODULE:NAME or FILE.py:NAME (docs/cli.md)")  # fmt: skip
    p.add_argument("--uncertain", metavar="FIELD=WIDTH,...", help="gymnax/brax: the box (g=0.2, g=abs:1.5)")
    p.add_argument("--costs", metavar="NAME,...", help="gymnax/brax: FIELD:LIMIT or FIELD>LIMIT:BUDGET[:GAMMA_C],...")
    p.add_argument("--noise", metavar="STD,...", help="gymnax:ID: the kernel's std per float state entry")
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...", help="files or modules "
                   "that register learners, rules, methods or environments (repeatable)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog=program_name(), description="Train robust-constrained RL algorithms and run the robustness test. "
               "Also 'rcmdp report', 'rcmdp feasibility' and 'rcmdp eval', each with its --help.")  # fmt: skip
    environment_options(p)
    add = p.add_argument
    add("--algos", default="all", help="comma-separated names, NAME@FIELD=X, NAME:SCHEDULE-TICK, or 'all' (default)")
    add("--schedules", action="store_true", help="MDPO-Robust under every alpha schedule; replaces --algos")
    add("--budget", default="short", choices=(*BUDGETS, AUTO), help="policy steps (default short; docs/budgets.md)")
    add("--steps", type=int, help="policy steps per run (overrides --budget; with --budget auto, its cap)")
    add("--seeds", type=int, default=10, help="number of seeds (default 10)")
    add("--vmap", action="store_true", default=True, help="all seeds in one vmapped call (default)")
    add("--no-vmap", dest="vmap", action="store_false", help="a Python loop over seeds (for comparison)")
    add("--out", help="run folder (default runs/<timestamp>); never overwritten")
    add("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="a Config/HParams field or "
        "plug-in option, e.g. --set adversary_candidates=8 (repeatable)")  # fmt: skip
    add("--n-test", type=int, help="episodes per test kernel (default the preset's)")
    add("--worst-case", nargs="?", const="all", choices=("all", "costs"), help="after the grid, search the box for "
        "each seed's worst kernel (the constraints' only: costs)")  # fmt: skip
    add("--resume", action="store_true", help="continue the run in --out, skipping finished algorithms")
    add("--eval-only", metavar="RUN_DIR", help="re-run the sweep of RUN_DIR from its checkpoints")
    add("--devices", default="auto", help="auto (default), all or N: the devices the seeds are sharded over")
    add("--distributed", action="store_true", help="one of several processes (jax.distributed; docs/cli.md)")
    add("--coordinator", metavar="HOST:PORT", help="--distributed: process 0's address")
    add("--num-processes", type=int, help="--distributed: how many processes")
    add("--process-id", type=int, help="--distributed: this process's index, 0 .. N-1")
    add("--compile-cache", metavar="DIR|off", type=lambda v: "off" if v.lower() == "off" else v, help="caches' folder")
    add("--plots", default="on", choices=("on", "off"), help="the report's figures (default on)")
    add("--tensorboard", default="auto", choices=("auto", "on", "off"), help="TensorBoard event files (default auto)")
    return p


def plan_and_folder(args, plan: Plan | None) -> tuple[Plan, RunFolder]:
    """The plan and its run folder: a saved one (``--eval-only``, ``--resume``: checked) or a new one (not written)."""
    if args.eval_only:  # the options it does not use (it takes the run folder's plan as it is)
        unused = ("env", "uncertain", "costs", "noise", "algos", "plugins", "schedules", "budget", "steps", "seeds",
                  "seed", "vmap", "out", "sets", "resume", "tensorboard")  # fmt: skip
        if unused := [f"--{k.replace('_', '-')}".replace("--sets", "--set") for k in unused if k in args.given]:
            raise PlanError(f"--eval-only reruns the sweep of a run folder as it was trained; it does not use "
                             f"{', '.join(unused)}: drop it, or train into a new --out")  # fmt: skip
        folder = RunFolder(args.eval_only)
        plan = folder.open("--eval-only", results=False)  # the results it re-creates
        if args.n_test is not None and args.n_test != plan.n_test:
            raise PlanError(f"--eval-only reruns the sweep of {folder.root} as it was run (--n-test "
                             f"{plan.n_test or 'default'}); to test with another --n-test, train into a new --out")  # fmt: skip
        return plan, folder
    plan = plan or resumed_plan(args) or build_plan(args)
    folder = RunFolder(args.out if args.out else args.cwd / "runs" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    if args.resume:
        saved = folder.open("--resume")
        if args.budget == AUTO:  # the budgets its search found, not the search's cap
            plan = with_budgets(plan, searched_budgets(folder, plan))
        if differ := saved.differences(plan):
            raise PlanError(f"--resume: the options differ from the run in {folder.root} ({', '.join(differ)}); use "
                             "the same options")  # fmt: skip
        return saved, folder
    return plan, folder


def searched_budgets(folder: RunFolder, plan: Plan) -> dict[str, int]:
    """``--resume --budget auto``: the budgets its search found (``budget_auto.json``) at this cap."""
    path = folder.root / "budget_auto.json"
    try:
        record = json.loads(path.read_text())
        found = {e: [(f["converged"], int(f["cap"])) for f in record[e].values()] for e in plan.envs}
        if any(n is not None and (type(n) is not int or n < 1) for rows in found.values() for n, _ in rows):
            raise ValueError("a converged budget that is not a whole number of steps")  # an edited file
    except (OSError, ValueError, KeyError, TypeError):
        raise PlanError(f"--resume --budget auto: {folder.root} was not trained with --budget auto (no readable "
                         f"{path.name}); resume it with the options it was started with, or --resume --out "
                         f"{folder.root} alone") from None  # fmt: skip
    for e, rows in found.items():
        cap = next(iter(plan.configs[e].values())).total_timesteps
        if any(c != cap for _, c in rows):
            raise PlanError(f"--resume --budget auto: the run in {folder.root} searched up to {rows[0][1]:,} policy "
                             f"steps on {e}, this command up to {cap:,} (--steps); use the same options")  # fmt: skip
    return {e: max(int(n or c) for n, c in rows) for e, rows in found.items()}


def searched_plan(plan: Plan, folder: RunFolder) -> Plan:
    """``--budget auto``: the plan at the budgets the search finds, its folder made with ``budget_auto.json``."""
    keys = jax.random.split(jax.random.PRNGKey(plan.seed), plan.seeds)  # the run's own seeds (the Study's)
    budgets, found = search_envs(plan.configs, keys, report=lambda line: print(line, flush=True))
    plan = with_budgets(plan, budgets)
    folder.create(plan)
    record = {e: {lr: {**dataclasses.asdict(f), "why": f.why()} for lr, f in by.items()} for e, by in found.items()}
    write_text(folder.root / "budget_auto.json", json.dumps(record, indent=1) + "\n")
    return plan


def main(argv=None) -> int:
    from rcmdp_jax.study.orchestrate import Study

    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        split_note = runtime.setup(args)
        plan = new_plan(args)  # before --distributed's handshake: bad input never waits for the others
        first = runtime.start_processes(args)  # the process that checks and writes the run folder
        plan, folder = plan_and_folder(args, plan)
        mesh = runtime.mesh_of(args)
        auto = args.budget == AUTO and not args.eval_only and not args.resume  # the folder after the search
        if not args.eval_only and not args.resume and first and not auto:
            folder.create(plan)
        release = take(folder.root) if first and not auto else (lambda: None)
    except (PlanError, RunFolderError) as err:
        return refuse(program_name(), str(err))
    runtime.speed_up(args.compile_cache)
    if auto:
        try:
            plan = searched_plan(plan, folder)
        except KeyboardInterrupt:
            print(f"{program_name()}: interrupted during --budget auto's search; nothing was written", file=sys.stderr)
            return 130
        release = take(folder.root)
    say_before_training(args, plan, folder, mesh, first, split_note)
    try:
        said = (f"finished algorithms are saved (a family in training from its last snapshot, if one was written); "
                f"continue with {runtime.resume_command(folder.root)}")  # fmt: skip
        with signals_exit(program_name(), said) as state:
            state.undo.append(release)
            return Study(plan, folder, args.resume, bool(args.eval_only), mesh, args.worst_case, args.plots == "on",
                         args.event_files).run()  # fmt: skip
    except (RunFolderError, DamagedFile) as err:  # a run.json that does not match its checkpoints; an unreadable
        return refuse(program_name(), str(err))  # train_metrics.npz that --eval-only does not re-create
    except OSError as err:  # a full disk, a folder that is not ours: one line, nothing half-written kept
        again = f"--eval-only {folder.root} again" if args.eval_only else runtime.resume_command(folder.root)
        return refuse(program_name(), f"{runtime.os_error(err, folder.root)}; finished algorithms are saved, continue "
                      f"with {again}")  # fmt: skip
    finally:
        release()
