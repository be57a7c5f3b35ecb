"""Rewrite a run folder's tables and plots from its saved results:

    python experiments/report.py RUN_DIR

(the logic is ``rcmdp_jax.report``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rcmdp_jax.plan import UsageError
from rcmdp_jax.report import write_env_report
from rcmdp_jax.run_folder import DamagedFile, RunFolder
from rcmdp_jax.runtime import os_error


def main(argv=None) -> int:
    from rcmdp_jax import envs

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python experiments/report.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    try:  # the runner's rules: an edited run.json is refused in one line
        meta = RunFolder(run_dir).read_plan("RUN_DIR")
    except UsageError as err:
        print(f"report.py: error: {err}", file=sys.stderr)
        return 2
    envs_, algos = meta["envs"], meta["algos"]
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (run_dir / e / a / "test_results.npz").exists()]
    if missing:
        print(f"report.py: error: no test results for {', '.join(missing)}; nothing was rewritten "
              "(run.py --resume or --eval-only makes them)", file=sys.stderr)  # fmt: skip
        return 2
    if locked := [str(run_dir / e) for e in envs_ if not os.access(run_dir / e, os.W_OK | os.X_OK)]:
        print(f"report.py: error: {', '.join(locked)}: Permission denied (not writable by this user); nothing was "
              "rewritten", file=sys.stderr)  # fmt: skip
        return 2
    for env_name in envs_:
        env, params = envs.make(env_name)
        try:
            md = write_env_report(run_dir / env_name, env_name, algos, env.lambda_max, params.xi_c, params.kappa)
        except DamagedFile as err:
            print(f"report.py: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # a full disk: one line naming the file
            print(f"report.py: error: {os_error(err, run_dir / env_name)}", file=sys.stderr)
            return 2
        print(f"## {env_name}\n\n{md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
