"""Rewrite a run folder's tables and plots from its saved results:

    python experiments/report.py RUN_DIR

(the logic is ``rcmdp_jax.report``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rcmdp_jax.report import write_env_report
from rcmdp_jax.run_folder import DamagedFile


def main(argv=None) -> int:
    from rcmdp_jax import envs

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python experiments/report.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    try:
        meta = json.loads((run_dir / "run.json").read_text())
        envs_, algos = meta["envs"], meta["algos"]
        if not all(isinstance(x, list) and all(isinstance(n, str) for n in x) for x in (envs_, algos)):
            raise ValueError("envs and algos must be lists of names")
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"report.py: error: {run_dir} is not a readable run folder ({err})", file=sys.stderr)
        return 2
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (run_dir / e / a / "test_results.npz").exists()]
    if missing:
        print(f"report.py: error: no test results for {', '.join(missing)}; nothing was rewritten "
              "(run.py --resume or --eval-only makes them)", file=sys.stderr)  # fmt: skip
        return 2
    for env_name in envs_:
        env, params = envs.make(env_name)
        try:
            md = write_env_report(run_dir / env_name, env_name, algos, env.lambda_max, params.xi_c, params.kappa)
        except DamagedFile as err:
            print(f"report.py: error: {err}", file=sys.stderr)
            return 2
        print(f"## {env_name}\n\n{md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
