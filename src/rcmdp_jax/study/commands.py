"""What the console commands share (``console`` dispatches to them): options whose error is
one line (``Parser``, ``UsageError``) and the options that name an environment
(``environment_options``), the error line with exit status 2 (``refuse``), and Ctrl-C or
SIGTERM said in one line with exit 130 or 143 (``signals_exit``; ``signals_held`` around
renames that must all happen)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

ENTRY: list = []  # non-empty in a console command's own process (``console.main``, ``report_main``)


class UsageError(ValueError):
    """Bad command-line input: reported in one line, exit status 2, nothing written."""


class Parser(argparse.ArgumentParser):
    """A command's options: a wrong one is a ``UsageError`` the command says in one line."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def environment_options(p: argparse.ArgumentParser) -> None:
    """``--env`` with a gymnax or brax environment's ``--uncertain``, ``--costs`` and ``--noise``,
    ``--plugins`` and ``--seed``: the training command's and ``rcmdp feasibility``'s (docs/cli.md)."""
    p.add_argument("--env", default="cartpole", help="cartpole (default), inventory, inventory3d or 'all' (training "
                   "only), NAME@FIELD=X (the constraint's limit X), gymnax:ID, brax:NAME, or your own environment, "
                   "PACKAGE.MODULE:NAME or FILE.py:NAME (docs/custom_envs.md)")  # fmt: skip
    p.add_argument("--uncertain", metavar="FIELD=WIDTH,...", help="gymnax:ID / brax:NAME: the uncertain fields and "
                   "their box half-widths, relative (g=0.2: ±20%%) or absolute (g=abs:1.5); replaces the preset's box")
    p.add_argument("--costs", metavar="NAME,...", help="gymnax:ID / brax:NAME: the preset's costs to keep, "
                   "FIELD:LIMIT (|FIELD| <= LIMIT) or 'FIELD>LIMIT:BUDGET[:GAMMA_C]' (unsafe steps per episode); "
                   "an id without costs runs the unconstrained algorithms only (docs/cli.md)")  # fmt: skip
    p.add_argument("--noise", metavar="STD,...", help="gymnax:ID: the kernel's std on each float state entry (one, "
                   "or one per entry; default the preset's, else 1e-3)")
    p.add_argument("--plugins", action="append", default=[], metavar="FILE.py|MODULE,...", help="files or modules "
                   "that register your learners, rules, robust methods or environments (repeatable; recorded in "
                   "run.json, loaded again by --resume, --eval-only and 'rcmdp report')")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")


def refuse(prog: str, message: str) -> int:
    """``PROG: error: MESSAGE`` on stderr; 2, a refusal's exit status."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


class SignalState:
    """What a signal handler of ``signals_exit`` says and undoes: ``said`` (what is kept),
    ``undo`` (functions called before the exit, in order)."""

    def __init__(self, said: str):
        self.said, self.undo = said, []


@contextlib.contextmanager
def signals_exit(prog: str, said: str):
    """Ctrl-C (SIGINT) and SIGTERM while the block runs: one line (``prog: interrupted:
    state.said``), ``state.undo`` run, exit 130 (143) at once (``os._exit``: no exception
    raised inside a library's callback, no half-written file kept by a ``finally``). The
    block gets the ``SignalState`` to change what is said and undone as it goes. In a
    console command's own process (``ENTRY``) a signal after the block, while the process
    ends, is ignored: the work is done (not a traceback or a death by signal)."""
    import signal
    import threading

    state = SignalState(said)
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted(signum, frame):
        signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # a second Ctrl-C does not cut the undoing short
        print(f"\n{prog}: interrupted: {state.said}", file=sys.stderr, flush=True)
        for undo in state.undo:
            try:
                undo()
            except Exception:  # the exit comes whatever is left to undo
                pass
        os._exit(128 + signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, interrupted) for s in signals} if main_thread else {}
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if ENTRY else handler)


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM held back while the block runs (renames that must all happen), then
    delivered."""
    import signal

    held = (signal.SIGINT, signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
