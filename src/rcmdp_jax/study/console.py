"""The console commands ``pip install`` makes (``[project.scripts]``):

    rcmdp [run.py's options]     train and test (``rcmdp --help``)
    rcmdp report RUN_DIR         rewrite a run folder's tables and plots
    rcmdp feasibility --env ...  whether the constraints can be kept on the box at all
    rcmdp eval RUN_DIR --algo A --seed S --kernel K   a trained policy on one kernel
    rcmdp-report RUN_DIR         the same
    python -m rcmdp_jax ...      the same as ``rcmdp``

``experiments/run.py`` and ``experiments/report.py`` call these functions too.
"""

from __future__ import annotations

import sys


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX's backends (the first
    computation does, and so does importing gymnax): ``--devices auto`` then shards the
    seeds over all cores. Called too late, it says so in one line (once per process). No
    effect on accelerators, or where ``XLA_FLAGS`` already sets the count."""
    from rcmdp_jax.study.devices import split_in_process

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


def report(argv=None) -> int:
    from rcmdp_jax.study.report_cli import main

    return main(argv)


def feasibility(argv=None) -> int:
    def command(argv):
        from rcmdp_jax.study.feasibility_cli import main

        return main(argv)

    return _started(command, argv, "no feasibility.json was written")


def evaluate(argv=None) -> int:
    def command(argv):
        from rcmdp_jax.study.eval_cli import main

        return main(argv)

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
