"""``rcmdp eval RUN --algo NAME --seed S --kernel 'FIELD=+20%,...'``: one trained policy of
a run folder (``study.policy.load_policy``) on one kernel, its return and constraint values
with standard errors over the episodes. Bad input is one line and exit 2, before anything
compiles; nothing is written (``--json FILE`` writes the numbers)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROG = "rcmdp eval"
# load_policy's and evaluate's argument names, as this command's options
OPTIONS = {"algorithm": "--algo", "seed must": "--episode-seed must", "seed": "--seed", "kernel": "--kernel",
           "n_episodes": "--n-episodes", "env": "--env", "load_policy: ": ""}


def as_options(message: str) -> str:
    """A message of ``load_policy`` / ``evaluate`` in this command's terms (``--algo``)."""
    for name, option in OPTIONS.items():
        if message.startswith(name):
            return option + message[len(name):]
    return message


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message} (see --help)")


def parse_args(argv):
    p = _Parser(prog=PROG, description="A trained policy of a run folder on one kernel named by its fields: the "
                "deterministic policy's discounted return and constraint values, mean and standard error over "
                "the episodes.")  # fmt: skip
    p.add_argument("run", metavar="RUN_DIR", help="a run folder (rcmdp --out)")
    p.add_argument("--algo", required=True, help="the algorithm, as run.json names it (e.g. MDPO-Lag)")
    p.add_argument("--seed", type=int, required=True, help="which trained seed: 0 .. seeds-1")
    p.add_argument("--kernel", default="nominal", metavar="FIELD=VALUE,...",
                   help="the kernel: each named field at a change in percent from its nominal value (masspole=+50%%) "
                        "or at an absolute value (m=11.0), the others nominal; the fields are the run's report's "
                        "(cartpole: xi[0] .. xi[3]); default nominal")  # fmt: skip
    p.add_argument("--n-episodes", type=int, default=None, help="episodes (default the run's test episodes per kernel)")
    p.add_argument("--episode-seed", type=int, default=None,
                   help="draw the episodes from PRNGKey(N) (default: the robustness test's key of this seed, so "
                        "a grid kernel gives test_results.npz's episodes)")  # fmt: skip
    p.add_argument("--env", default=None, help="the environment, when the run holds several")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the numbers to FILE (JSON)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        from rcmdp_jax.study.compiled import ticking
        from rcmdp_jax.study.policy import load_policy

        if args.json is not None and Path(args.json).is_dir():
            raise ValueError(f"--json {args.json} is a folder; name a file")
        with ticking(f"{PROG}:", f"reading {args.algo}'s checkpoint"):
            policy = load_policy(Path(args.run).absolute(), args.algo, args.seed, args.env)
        with ticking(f"{PROG}:", "compiling and running the episodes"):
            result = policy.evaluate(args.kernel, args.n_episodes, args.episode_seed)
    except (ValueError, TypeError) as err:  # RunFolderError is a ValueError
        print(f"{PROG}: error: {as_options(str(err))}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1))
    return 0
