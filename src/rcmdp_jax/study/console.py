"""The console commands ``pip install`` makes (``[project.scripts]``):

    rcmdp [run.py's options]     train and test (``rcmdp --help``)
    rcmdp report RUN_DIR         rewrite a run folder's tables and plots
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
    note = split_in_process("auto", 2)
    if note:
        print(note, flush=True)


_SAID: list[bool] = []


def split_in_process(devices: str, seeds: int) -> str:
    """For ``rcmdp_jax.study.cli.main`` called from a user's script: split the CPU into one
    device per core (``--devices auto``) unless JAX already started; then, once per
    process, the one line that says why the seeds run on fewer devices and how to get
    them all ("" when there is nothing to say)."""
    import os

    from rcmdp_jax import sharding

    cores = sharding.available_cores()
    if devices != "auto" or cores < 2 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return ""
    if sharding.split_cpu(cores) or _SAID:
        return ""
    import jax

    have = jax.local_device_count()
    if jax.default_backend() != "cpu" or have >= cores or seeds < 2:
        return ""
    _SAID.append(True)
    return (f"rcmdp_jax: note: JAX started in this process before rcmdp_jax could split the CPU, so the seeds "
            f"run on {have} device(s), not {cores}; call rcmdp_jax.study.console.split_cpu() before any JAX work "
            f"and before importing gymnax, or set XLA_FLAGS=--xla_force_host_platform_device_count={cores}")  # fmt: skip


class _Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's stop) while the command starts: handled as Ctrl-C is."""


def _terminate(signum, frame):
    raise _Terminated()


def train(argv=None) -> int:
    """The main job (``rcmdp_jax.study.cli.main``) with the CPU split into devices first.
    Ctrl-C (or SIGTERM) while it starts (imports, checks, a user's module) is one line and
    exit 130 (143), as it is once the study runs (``runtime.ctrl_c_exits``)."""
    import signal
    import threading

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        split_cpu()
        from rcmdp_jax.study.cli import main

        return main(argv)
    except KeyboardInterrupt as err:
        print("\ninterrupted while starting: nothing was trained", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(err, _Terminated) else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def report(argv=None) -> int:
    from rcmdp_jax.study.report_cli import main

    return main(argv)


def main(argv=None) -> int:
    """``rcmdp report RUN_DIR`` or ``rcmdp [options]`` (training)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report(argv[1:])
    return train(argv)


def report_main() -> int:
    return report(sys.argv[1:])
