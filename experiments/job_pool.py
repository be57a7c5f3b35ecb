"""``run_pool``: shell jobs run a few at a time (experiments/robustness.py's settings)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_pool(jobs: list[tuple[str, list[str]]], width: int, log, done) -> float:
    """Run the ``(name, command)`` jobs ``width`` at a time, in order (XLA compiles a
    program on one core, and compiling dominates short budgets, so two jobs on two cores
    overlap one's compile with the other's); ``done(name, seconds)`` after each. The
    pool's wall time."""
    t0, queue, running = time.time(), list(jobs), {}
    while queue or running:
        while queue and len(running) < width:
            name, cmd = queue.pop(0)
            log(" ".join(cmd[1:]))
            running[name] = (subprocess.Popen(cmd, cwd=ROOT), time.time())
        time.sleep(1.0)
        for name, (proc, start) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            if proc.returncode not in (0, 3):  # 3: some seeds diverged (named in the report)
                for other, _ in running.values():
                    other.terminate()
                raise SystemExit(f"{name}: exited with status {proc.returncode}")
            done(name, time.time() - start)
    return time.time() - t0
