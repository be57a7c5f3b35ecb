"""The one entry point: every console command ``pip install`` makes (``[project.scripts]``)
dispatches from here (``main``), each to its own module:

    rcmdp [run.py's options]     train and test (``rcmdp --help``; ``cli.main``)
    rcmdp report RUN_DIR         rewrite a run folder's tables and plots (``report_command``)
    rcmdp feasibility --env ...  whether the constraints can be kept on the box at all (``feasibility_command``)
    rcmdp eval RUN_DIR --algo A --seed S --kernel K   a trained policy on one kernel (``eval_command``)
    rcmdp-report RUN_DIR         the same as ``rcmdp report``
    python -m rcmdp_jax ...      the same as ``rcmdp``

``experiments/run.py`` and ``experiments/report.py`` call these functions too. The commands'
imports are inside them: ``rcmdp`` imports nothing before the CPU split."""

from __future__ import annotations

import functools
import importlib
import sys

from rcmdp_jax.study.commands import ENTRY


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX's backends (``--devices auto``
    then shards the seeds over all cores); called too late, it says so in one line."""
    from rcmdp_jax.study.runtime import split_in_process

    note = split_in_process("auto", 2)
    if note:
        print(note, flush=True)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def _started(command, argv, said: str) -> int:
    """``command(argv)``; Ctrl-C (SIGTERM) while it starts (imports, checks, a user's module) is
    one line (``said``) and exit 130 (143), as it is once it trains (``runtime.ctrl_c_exits``)."""
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


def _run(module: str, argv) -> int:
    """The command ``rcmdp_jax.study.MODULE.run`` on ``argv`` (the process's own when None)."""
    return importlib.import_module(f"rcmdp_jax.study.{module}").run(sys.argv[1:] if argv is None else list(argv))


def feasibility(argv=None) -> int:
    return _started(functools.partial(_run, "feasibility_command"), argv, "no feasibility.json was written")


def evaluate(argv=None) -> int:
    return _run("eval_command", argv)


def report(argv=None) -> int:
    if argv is None:  # experiments/report.py
        ENTRY.append(True)
    return _run("report_command", argv)


def main(argv=None) -> int:
    """``rcmdp report RUN_DIR``, ``rcmdp feasibility ...``, ``rcmdp eval ...`` or ``rcmdp [options]`` (training)."""
    if argv is None:
        ENTRY.append(True)
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"report": report, "feasibility": feasibility, "eval": evaluate}
    return commands[argv[0]](argv[1:]) if argv[:1] and argv[0] in commands else train(argv)


def report_main() -> int:
    ENTRY.append(True)
    return report(sys.argv[1:])
