"""What the console commands share: a refusal in one line with exit 2, Ctrl-C or SIGTERM in
one line with exit 130 or 143."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import types

ENTRY: list = []  # non-empty in a console command's own process (``console.main``, ``report_main``)


class Parser(argparse.ArgumentParser):
    """A command's options: a wrong one is a ``PlanError`` the command says in one line."""

    def error(self, message):
        from rcmdp_jax.sizes import PlanError  # here: a command imports nothing heavy before the CPU split

        raise PlanError(f"{message} (see --help)")


def refuse(prog: str, message: str) -> int:
    """``PROG: error: MESSAGE`` on stderr; 2, a refusal's exit status."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def signals_exit(prog: str, said: str):
    """Ctrl-C (SIGTERM) in the block: ``prog: interrupted: said``, ``undo`` run, ``os._exit`` 130 (143) (nothing kept
    half-written by a ``finally``); in a command's own process (``ENTRY``) one after the block is ignored."""
    state = types.SimpleNamespace(said=said, undo=[], held=None)  # what the handler says and calls before the exit
    signals = (signal.SIGINT, signal.SIGTERM)

    def interrupted(signum, frame):
        if state.held is not None:  # a list while renames must all happen: the signal kept for their end
            return state.held.append(signum)
        state.held = []  # a second Ctrl-C (any thread may take it) is kept, not run: the undoing is not cut short
        print(f"\n{prog}: interrupted: {state.said}", file=sys.stderr, flush=True)
        for undo in state.undo:
            with contextlib.suppress(Exception):  # the exit comes whatever is left to undo
                undo()
        os._exit(128 + signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, interrupted) for s in signals} if main_thread else {}
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if ENTRY else handler)
