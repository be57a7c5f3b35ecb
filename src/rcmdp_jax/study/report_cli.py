"""``rcmdp report RUN_DIR`` (also ``rcmdp-report`` and ``python experiments/report.py``):
rewrite a run folder's tables and plots from its saved results, in a fresh process
(a user environment is rebuilt from ``run.json``'s ``env_sources``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rcmdp_jax.study import folder_lock
from rcmdp_jax.study.errors import RunFolderError
from rcmdp_jax.study.run_folder import DamagedFile, RunFolder
from rcmdp_jax.study.runtime import os_error

PROG = "rcmdp report"  # as its error lines begin, like the runner's and feasibility's
USAGE = "usage: rcmdp report RUN_DIR  (or: python experiments/report.py RUN_DIR)"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    folder = RunFolder(Path(argv[0]))
    try:
        plan = folder.read_plan("RUN_DIR")
        folder.check_seeds(plan, "RUN_DIR")  # as --eval-only checks it: the results are this plan's
    except RunFolderError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    release = None
    try:  # not while a run writes the folder; one this user may not write: whether a run holds it
        if os.access(folder.root, os.W_OK | os.X_OK):
            release = folder.lock()
        elif (pid := folder_lock.holder(folder.root)) is not None:
            raise RunFolderError(folder_lock.in_use(folder.root, pid))
    except RunFolderError as err:
        print(f"{PROG}: error: {err}; nothing was rewritten", file=sys.stderr)
        return 2
    try:
        return _rewrite(folder, plan)
    finally:
        if release is not None:
            release()


def _rewrite(folder: RunFolder, plan) -> int:
    from rcmdp_jax import envs
    from rcmdp_jax.study.report import write_env_report

    envs_, algos = list(plan.envs), list(plan.algos)
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (folder.algo_dir(e, a) / "test_results.npz").exists()]
    if missing:
        print(f"{PROG}: error: no test results for {', '.join(missing)}; nothing was rewritten "
              "(run.py --resume or --eval-only makes them)", file=sys.stderr)  # fmt: skip
        return 2
    if locked := [str(folder.env_dir(e)) for e in envs_ if not os.access(folder.env_dir(e), os.W_OK | os.X_OK)]:
        print(f"{PROG}: error: {', '.join(locked)}: Permission denied (not writable by this user); nothing was "
              "rewritten", file=sys.stderr)  # fmt: skip
        return 2
    for env_name in envs_:
        env, params = envs.make(env_name)
        try:
            md = write_env_report(folder.env_dir(env_name), env_name, algos, env.lambda_max, params.xi_c, params.kappa)
        except DamagedFile as err:
            print(f"{PROG}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # a full disk: one line naming the file
            print(f"{PROG}: error: {os_error(err, folder.env_dir(env_name))}", file=sys.stderr)
            return 2
        print(f"## {env_name}\n\n{md}")
    return 0
