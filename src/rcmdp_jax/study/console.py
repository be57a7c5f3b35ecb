"""The console commands' entry points (``[project.scripts]``, ``python -m rcmdp_jax``): ``main``
dispatches ``rcmdp report|feasibility|eval`` to its module, else trains (``cli.main``). Imports
are inside the commands: ``rcmdp`` imports nothing before the CPU split."""

from __future__ import annotations

import functools
import importlib
import sys

from rcmdp_jax.study.commands import ENTRY


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX; called too late, it says so."""
    from rcmdp_jax.study.runtime import split_in_process

    note = split_in_process("auto", 2)
    if note:
        print(note, flush=True)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def _started(command, argv, said: str) -> int:
    """``command(argv)``; Ctrl-C (SIGTERM) while it starts is one line (``said``), exit 130 (143)."""
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
    """``cli.main`` with the CPU split first."""

    def command(argv):
        split_cpu()
        from rcmdp_jax.study.cli import main

        return main(argv)

    return _started(command, argv, "nothing was trained")


def _run(module: str, argv) -> int:
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
    if argv is None:
        ENTRY.append(True)
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"report": report, "feasibility": feasibility, "eval": evaluate}
    return commands[argv[0]](argv[1:]) if argv[:1] and argv[0] in commands else train(argv)


def report_main() -> int:
    ENTRY.append(True)
    return report(sys.argv[1:])
