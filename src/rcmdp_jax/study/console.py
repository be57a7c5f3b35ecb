"""The one entry point: every console command ``pip install`` makes (``[project.scripts]``)
dispatches from here (``main``):

    rcmdp [run.py's options]     train and test (``rcmdp --help``; ``cli.main``)
    rcmdp report RUN_DIR         rewrite a run folder's tables and plots (``report``)
    rcmdp feasibility --env ...  whether the constraints can be kept on the box at all (``feasibility_cli``)
    rcmdp eval RUN_DIR --algo A --seed S --kernel K   a trained policy on one kernel (``evaluate``)
    rcmdp-report RUN_DIR         the same as ``rcmdp report``
    python -m rcmdp_jax ...      the same as ``rcmdp``

``experiments/run.py`` and ``experiments/report.py`` call these functions too.

``rcmdp report RUN_DIR`` (also ``rcmdp-report`` and ``python experiments/report.py``)
rewrites a run folder's tables and plots from its saved results, in a fresh process (a user
environment is rebuilt from ``run.json``'s ``env_sources``).

``rcmdp eval RUN --algo NAME --seed S --kernel 'FIELD=+20%,...'``: one trained policy of a
run folder (``study.policy.load_policy``) on one kernel, its return and constraint values
with standard errors over the episodes. Bad input is one line and exit 2, before anything
compiles; nothing is written (``--json FILE`` writes the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX's backends (the first
    computation does, and so does importing gymnax): ``--devices auto`` then shards the
    seeds over all cores. Called too late, it says so in one line (once per process). No
    effect on accelerators, or where ``XLA_FLAGS`` already sets the count."""
    from rcmdp_jax.study.runtime import split_in_process

    note = split_in_process("auto", 2)
    if note:
        print(note, flush=True)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def _started(command, argv, said: str) -> int:
    """``command(argv)``; Ctrl-C (or SIGTERM) while it starts (imports, checks, a user's
    module) is one line (``said``) and exit 130 (143), as it is once it trains
    (``runtime.ctrl_c_exits``)."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return command(argv)
    except KeyboardInterrupt as err:
        print(f"\ninterrupted while starting: {said}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(err, _Terminated) else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def train(argv=None) -> int:
    """The main job (``rcmdp_jax.study.cli.main``) with the CPU split into devices first."""

    def command(argv):
        split_cpu()
        from rcmdp_jax.study.cli import main

        return main(argv)

    return _started(command, argv, "nothing was trained")


def feasibility(argv=None) -> int:
    def command(argv):
        from rcmdp_jax.study.feasibility_cli import main

        return main(argv)

    return _started(command, argv, "no feasibility.json was written")


def evaluate(argv=None) -> int:
    def command(argv):
        return _evaluate(argv)

    return _started(command, argv, "nothing was evaluated")


def main(argv=None) -> int:
    """``rcmdp report RUN_DIR``, ``rcmdp feasibility ...``, ``rcmdp eval ...`` or ``rcmdp [options]`` (training)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report(argv[1:])
    if argv[:1] == ["feasibility"]:
        return feasibility(argv[1:])
    if argv[:1] == ["eval"]:
        return evaluate(argv[1:])
    return train(argv)


def report_main() -> int:
    return report(sys.argv[1:])


# --- rcmdp report RUN_DIR ---
REPORT_PROG = "rcmdp report"  # as its error lines begin, like the runner's and feasibility's
REPORT_USAGE = "usage: rcmdp report RUN_DIR  (or: python experiments/report.py RUN_DIR)"


def report(argv=None) -> int:
    """``rcmdp report RUN_DIR``: the run folder's tables and plots rewritten (its imports
    here, so that ``rcmdp`` imports nothing before the CPU split)."""
    from rcmdp_jax.study.errors import RunFolderError
    from rcmdp_jax.study.run_folder import RunFolder, holder, in_use

    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1 or argv[0].startswith("-"):
        print(REPORT_USAGE, file=sys.stderr)
        return 0 if argv in (["-h"], ["--help"]) else 2
    folder = RunFolder(Path(argv[0]))
    try:
        plan = folder.read_plan("RUN_DIR")
        folder.check_seeds(plan, "RUN_DIR")  # as --eval-only checks it: the results are this plan's
    except RunFolderError as err:
        print(f"{REPORT_PROG}: error: {err}", file=sys.stderr)
        return 2
    release = None
    try:  # not while a run writes the folder; one this user may not write: whether a run holds it
        if os.access(folder.root, os.W_OK | os.X_OK):
            release = folder.lock()
        elif (pid := holder(folder.root)) is not None:
            raise RunFolderError(in_use(folder.root, pid))
    except RunFolderError as err:
        print(f"{REPORT_PROG}: error: {err}; nothing was rewritten", file=sys.stderr)
        return 2
    try:
        return _rewrite(folder, plan)
    finally:
        if release is not None:
            release()


def _rewrite(folder, plan) -> int:
    from rcmdp_jax import envs
    from rcmdp_jax.study.report import write_env_report
    from rcmdp_jax.study.run_folder import DamagedFile
    from rcmdp_jax.study.runtime import os_error

    envs_, algos = list(plan.envs), list(plan.algos)
    missing = [f"{e}/{a}" for e in envs_ for a in algos if not (folder.algo_dir(e, a) / "test_results.npz").exists()]
    if missing:
        print(f"{REPORT_PROG}: error: no test results for {', '.join(missing)}; nothing was rewritten "
              "(run.py --resume or --eval-only makes them)", file=sys.stderr)  # fmt: skip
        return 2
    if locked := [str(folder.env_dir(e)) for e in envs_ if not os.access(folder.env_dir(e), os.W_OK | os.X_OK)]:
        print(f"{REPORT_PROG}: error: {', '.join(locked)}: Permission denied (not writable by this user); nothing was "
              "rewritten", file=sys.stderr)  # fmt: skip
        return 2
    for env_name in envs_:
        env, params = envs.make(env_name)
        try:
            md = write_env_report(folder.env_dir(env_name), env_name, algos, env.lambda_max, params.xi_c, params.kappa)
        except DamagedFile as err:
            print(f"{REPORT_PROG}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # a full disk: one line naming the file
            print(f"{REPORT_PROG}: error: {os_error(err, folder.env_dir(env_name))}", file=sys.stderr)
            return 2
        print(f"## {env_name}\n\n{md}")
    return 0


# --- rcmdp eval RUN_DIR --algo NAME --seed S --kernel K ---
EVAL_PROG = "rcmdp eval"
# load_policy's and evaluate's argument names, as this command's options
EVAL_OPTIONS = {"algorithm": "--algo", "seed must": "--episode-seed must", "seed": "--seed", "kernel": "--kernel",
           "n_episodes": "--n-episodes", "env": "--env", "load_policy: ": ""}


def as_options(message: str) -> str:
    """A message of ``load_policy`` / ``evaluate`` in this command's terms (``--algo``)."""
    for name, option in EVAL_OPTIONS.items():
        if message.startswith(name):
            return option + message[len(name):]
    return message


class _EvalParser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(f"{message} (see --help)")


def eval_args(argv):
    p = _EvalParser(prog=EVAL_PROG, description="A trained policy of a run folder on one kernel named by its fields: the "
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


def _evaluate(argv=None) -> int:
    """``rcmdp eval``'s work (``evaluate`` runs it with Ctrl-C said in one line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = eval_args(argv)
        from rcmdp_jax.study.compiled import ticking
        from rcmdp_jax.study.policy import load_policy

        if args.json is not None and Path(args.json).is_dir():
            raise ValueError(f"--json {args.json} is a folder; name a file")
        with ticking(f"{EVAL_PROG}:", f"reading {args.algo}'s checkpoint"):
            policy = load_policy(Path(args.run).absolute(), args.algo, args.seed, args.env)
        with ticking(f"{EVAL_PROG}:", "compiling and running the episodes"):
            result = policy.evaluate(args.kernel, args.n_episodes, args.episode_seed)
    except (ValueError, TypeError) as err:  # RunFolderError is a ValueError
        print(f"{EVAL_PROG}: error: {as_options(str(err))}", file=sys.stderr)
        return 2
    print("\n".join(result.lines()))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1))
    return 0
