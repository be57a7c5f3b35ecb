"""``run_pool``: shell jobs run a few at a time (experiments/robustness.py's settings,
experiments/nominal_constraint.py's runs), under the one exit-code rule of
``experiments/launch.py``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from launch import explain, finished

ROOT = Path(__file__).resolve().parents[1]


def run_pool(jobs: list[tuple[str, list[str]]], width: int, log, done, logs: Path | None = None) -> float:
    """Run the ``(name, command)`` jobs ``width`` at a time, in order (XLA compiles a
    program on one core, and compiling dominates short budgets, so two jobs on two cores
    overlap one's compile with the other's); ``done(name, seconds)`` after each. A job that
    ends outside ``launch.FINISHED`` stops the others and the pool, naming its status. With
    ``logs``, each job's output is appended to ``logs/NAME.log``. The pool's wall time."""
    t0, queue, running = time.time(), list(jobs), {}
    while queue or running:
        while queue and len(running) < width:
            name, cmd = queue.pop(0)
            log(" ".join(cmd[1:]))
            out = open(Path(logs) / f"{name}.log", "a") if logs is not None else None
            running[name] = (subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT if out else None), time.time())
            if out is not None:
                out.close()  # the child holds its own copy
        time.sleep(1.0)
        for name, (proc, start) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[name]
            if not finished(proc.returncode):
                for other, _ in running.values():
                    other.terminate()
                raise SystemExit(f"{name}: exited with status {proc.returncode} ({explain(proc.returncode)})")
            done(name, time.time() - start)
    return time.time() - t0
