"""``rcmdp report RUN_DIR`` (``rcmdp-report``, ``experiments/report.py``): a run folder's report written again, each
environment's in a stage (``.report-PID``) renamed over its files at the end: all old or all new, whenever Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

from rcmdp_jax.study.commands import refuse, signals_exit

PROG = "rcmdp report"  # as its error lines begin, like the runner's and feasibility's
STAGE = ".report-"  # the folder (in an environment's) where a report is written before it replaces the old one
KEPT = "nothing was rewritten"


def run(argv: list) -> int:
    """The command on its arguments (``console.report``)."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: rcmdp report RUN_DIR  (or: python experiments/report.py RUN_DIR)", file=sys.stderr)
        said = f"one RUN_DIR and no options, got {' '.join(argv)}" if argv else "RUN_DIR is missing"
        return 0 if argv in (["-h"], ["--help"]) else refuse(PROG, said)
    with signals_exit(PROG, KEPT) as state:
        from rcmdp_jax.study.run_folder import RunFolder, RunFolderError, holder, take

        folder, release = RunFolder(Path(argv[0])), (lambda: None)
        try:
            plan = folder.open("RUN_DIR")  # as --resume checks it: the results are this plan's
        except RunFolderError as err:
            return report_error(str(err))
        try:  # not while a run writes the folder; one this user may not write: whether a run holds it
            if os.access(folder.root, os.W_OK | os.X_OK):
                release = take(folder.root)
            elif (busy := holder(folder.root)) is not None:
                raise RunFolderError(busy)
        except RunFolderError as err:
            return report_error(f"{err}; {KEPT}")
        state.undo.append(release)
        try:
            return _rewrite(folder, plan, state)
        finally:
            state.undo.remove(release)
            release()


def report_error(message: str) -> int:
    """The refusal in one line, named as the command was called, its advice in the matching runner's terms."""
    from rcmdp_jax.study.runtime import program_name

    called = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    prog = called if called in ("rcmdp-report", "report.py") else PROG
    return refuse(prog, message.replace("run.py --", f"{program_name()} --"))


def _rewrite(folder, plan, state) -> int:
    from rcmdp_jax import envs
    from rcmdp_jax.study.report import write_env_report
    from rcmdp_jax.study.run_folder import DamagedFile
    from rcmdp_jax.study.runtime import os_error

    envs_, algos = plan.envs, plan.algos
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (folder.algo_dir(e, a) / "test_results.npz").exists()]
    if missing:
        return report_error(f"no test results for {', '.join(missing)}; {KEPT} (run.py --resume or --eval-only "
                            "makes them)")  # fmt: skip
    if locked := [str(folder.env_dir(e)) for e in envs_ if not os.access(folder.env_dir(e), os.W_OK | os.X_OK)]:
        return report_error(f"{', '.join(locked)}: Permission denied (not writable by this user); {KEPT}")
    stages: dict = {}

    def drop_stages():
        for stage in stages.values():
            shutil.rmtree(stage, ignore_errors=True)

    state.undo.insert(0, drop_stages)
    tables = []
    try:
        for env_name in envs_:
            env_dir = folder.env_dir(env_name)
            try:  # a fresh stage ``env_dir/.report-PID``; one a killed report left goes first (the lock is held)
                for old in env_dir.glob(STAGE + "*"):
                    shutil.rmtree(old, ignore_errors=True)
                stages[env_dir] = env_dir / f"{STAGE}{os.getpid()}"
                stages[env_dir].mkdir()
                md = write_env_report(folder, env_name, algos, envs.make(env_name), plan.configs[env_name],
                                      out=stages[env_dir])  # fmt: skip
            except (DamagedFile, OSError) as err:  # a file named by where it goes, not by the stage
                said = str(err) if isinstance(err, DamagedFile) else os_error(err, env_dir)  # a full disk: the file
                return report_error(f"{said.replace(str(stages.get(env_dir, env_dir)), str(env_dir))}; {KEPT}")
            tables.append(f"## {env_name}\n\n{md}")
        state.held = []  # every staged file renamed over its old one: all or none (a mask: other threads take it)
        for env_dir, stage in stages.items():
            for f in stage.iterdir():
                if f.is_file():
                    os.replace(f, env_dir / f.name)
        state.said = "the report was rewritten"
    finally:  # a Ctrl-C (SIGTERM) held back comes now; the stages go (emptied when renamed)
        held, state.held = state.held or [], None
        for signum in held[:1]:
            signal.raise_signal(signum)
        drop_stages()
        state.undo.remove(drop_stages)
    print(*tables, sep="\n")  # a plan has at least one environment
    return 0
