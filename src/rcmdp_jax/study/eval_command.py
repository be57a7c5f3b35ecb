"""``rcmdp eval RUN --algo NAME --seed S --kernel 'FIELD=+20%,...'``: one trained policy of a run
folder on one kernel (``policy.load_policy``), its return and constraints over the episodes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from rcmdp_jax.study.commands import Parser, refuse, signals_exit

PROG = "rcmdp eval"
# load_policy's and evaluate's argument names, as this command's options
OPTIONS = {"algorithm": "--algo", "seed must": "--episode-seed must", "seed": "--seed", "kernel": "--kernel",
           "n_episodes": "--n-episodes", "env": "--env", "load_policy: ": ""}  # fmt: skip


def run(argv: list) -> int:
    p = Parser(prog=PROG, description="A trained policy of a run folder on one kernel (docs/cli.md).")
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (rcmdp --out)")
    p.add_argument("--algo", required=True, help="the algorithm, as run.json names it (e.g. MDPO-Lag)")
    p.add_argument("--seed", type=int, required=True, help="which trained seed: 0 .. seeds-1")
    p.add_argument("--kernel", default="nominal", metavar="FIELD=VALUE,...", help="fields changed (masspole=+50%%) "
                   "or set (m=11.0), the others nominal")  # fmt: skip
    p.add_argument("--n-episodes", type=int, default=None, help="episodes (default the run's test episodes per kernel)")
    p.add_argument("--episode-seed", type=int, default=None, help="the episodes' PRNGKey (default the test's)")
    p.add_argument("--env", default=None, help="the environment, when the run holds several")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers to FILE (JSON)")
    with signals_exit(PROG, "nothing was evaluated or written"):
        try:
            args = p.parse_args(argv)
            from rcmdp_jax.atomic import write_text
            from rcmdp_jax.study.policy import load_policy
            from rcmdp_jax.study.runtime import os_error, ticking

            check_json_path(args.json)  # before anything is evaluated
            with ticking(f"{PROG}:", f"reading {args.algo}'s checkpoint"):
                policy = load_policy(Path(args.run).absolute(), args.algo, args.seed, args.env)
            with ticking(f"{PROG}:", "compiling and running the episodes"):
                result = policy.evaluate(args.kernel, args.n_episodes, args.episode_seed)
            print("\n".join(result.lines()))
            if args.json is not None:
                try:
                    write_text(Path(args.json), json.dumps(result.to_dict(), indent=1, allow_nan=False))
                except OSError as err:
                    return refuse(PROG, f"--json {os_error(err, args.json)}")
        except (ValueError, TypeError) as err:  # RunFolderError is a ValueError; said in this command's options
            said = next((o + str(err)[len(n) :] for n, o in OPTIONS.items() if str(err).startswith(n)), str(err))
            return refuse(PROG, said)
        return 0


def check_json_path(path: str | None) -> None:
    """``--json FILE``: a file that can be written, else ``ValueError`` in one line."""
    if path is None:
        return
    if not path.strip():
        raise ValueError("--json is empty; name a file (or leave --json out)")
    try:
        target = Path(path)
        if target.is_dir():
            raise ValueError(f"--json {path} is a folder; name a file")
        if target.exists() or target.is_symlink():  # nothing written before is overwritten
            raise ValueError(f"--json {path} already exists; name a new file (or remove it)")
        parent = target.absolute().parent
        if not parent.is_dir():
            raise ValueError(f"--json {path}: its folder {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(f"--json {path}: Permission denied (not writable by this user)")
    except OSError as err:  # a name too long
        raise ValueError(f"--json {path}: {err.strerror or err}") from None
