"""The console commands' entry points (``[project.scripts]``, ``python -m rcmdp_jax``): ``main`` dispatches
``rcmdp report|feasibility|eval`` to its module, else trains (``cli.main``), importing nothing before the CPU split."""

from __future__ import annotations

import importlib
import sys

from rcmdp_jax.study.commands import ENTRY


def split_cpu() -> None:
    """One XLA device per CPU core, before anything starts JAX; called too late, it says so."""
    from rcmdp_jax.study.runtime import split_in_process

    if note := split_in_process("auto", 2):
        print(note, flush=True)


def _started(command, argv, said: str) -> int:
    """``command(argv)``; Ctrl-C (SIGTERM) while it starts is one line (``said``), exit 130 (143)."""
    import signal
    import threading

    def terminate(signum, frame):  # SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is
        raise KeyboardInterrupt(signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate) if main_thread else None
    try:
        return command(argv)
    except KeyboardInterrupt as err:
        print(f"\ninterrupted while starting: {said}", file=sys.stderr)
        return 128 + signal.SIGTERM if err.args == (signal.SIGTERM,) else 130
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


# ``rcmdp COMMAND``: its module (``run(argv)``), and what Ctrl-C while it starts leaves (None: its own handling)
COMMANDS = {"report": ("report_command", None), "eval": ("eval_command", None),
            "feasibility": ("feasibility_command", "no feasibility.json was written")}  # fmt: skip


def _command(name: str, argv) -> int:
    module, said = COMMANDS[name]
    run = importlib.import_module(f"rcmdp_jax.study.{module}").run
    return run(argv) if said is None else _started(run, argv, said)


def main(argv=None, command: str | None = None) -> int:
    """``rcmdp [COMMAND] ...`` (``argv`` None: the command's own process); ``command``: the one an entry point names."""
    if argv is None:
        ENTRY.append(True)
    argv = ([command] if command else []) + (sys.argv[1:] if argv is None else list(argv))
    return _command(argv[0], argv[1:]) if argv[:1] and argv[0] in COMMANDS else train(argv)


def report(argv=None) -> int:
    """``rcmdp report`` (``rcmdp-report``, ``experiments/report.py``)."""
    return main(argv, "report")


report_main = report  # ``rcmdp-report``'s entry point
