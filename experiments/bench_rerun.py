"""What a user waits for on a first run and on a rerun that changes only a number (a benchmark,
not a test): the quick start (``rcmdp --env gymnax:CartPole-v1 --algos PPO-Lag,PPO-Robust-Lag
--seeds 3``) run twice in new processes on one fresh ``--compile-cache``, the second with only
``--set lr=...`` changed::

    python experiments/bench_rerun.py --json FILE [--python /other/venv/bin/python --label before]

Each line the command prints is timed as it arrives. Per run: the seconds to its first line
(``rcmdp_jax: N algorithm run(s) ...``: imports, the plan, the run folder), from there to the
line that says the family's program is ready (``compiled in`` or ``loaded compiled program``),
and to its first progress line (the end of the first training chunk: the first iteration's
result is on the host), and the whole wall time. ``--python`` runs another checkout's
interpreter (the code before a change), ``--steps`` a shorter budget."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = ["--env", "gymnax:CartPole-v1", "--algos", "PPO-Lag,PPO-Robust-Lag", "--seeds", "3", "--plots", "off"]


def timed(cmd: list[str]) -> dict:
    """Run ``cmd``; the seconds at which its landmark lines arrived, and its wall time."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    marks, lines = {}, []
    for line in proc.stdout:
        t = time.perf_counter() - t0
        lines.append(line.rstrip())
        if "algorithm run(s)" in line:
            marks.setdefault("first_line", t)
        if re.search(r"compiled in|loaded compiled program", line):
            marks.setdefault("program_ready", t)
            marks.setdefault("program_line", line.strip())
        if re.search(r"%\s+elapsed", line):
            marks.setdefault("first_chunk", t)
    rc = proc.wait()
    out = {"rc": rc, "wall_s": round(time.perf_counter() - t0, 2)}
    out.update({k: round(v, 2) if isinstance(v, float) else v for k, v in marks.items()})
    if "first_line" in marks and "first_chunk" in marks:
        out["first_line_to_first_chunk_s"] = round(marks["first_chunk"] - marks["first_line"], 2)
    if rc != 0:
        out["tail"] = lines[-5:]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter whose rcmdp_jax runs (default: this one)")
    p.add_argument("--label", default="after")
    p.add_argument("--lr", default="0.0006", help="the rerun's --set lr=")
    p.add_argument("--steps", default=None, help="a shorter budget (default: the preset's)")
    p.add_argument("--json", default=None, help="append the figures to this file")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_rerun_"))
    base = [args.python, "-m", "rcmdp_jax", *QUICK, "--compile-cache", str(work / "cache")]
    base += ["--steps", args.steps] if args.steps else []
    runs = {}
    for name, extra in (("first", []), ("rerun_lr", ["--set", f"lr={args.lr}"])):
        runs[name] = timed(base + ["--out", str(work / name), *extra])
        print(args.label, name, json.dumps(runs[name]), flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from launch import describe, machine

    record = {"label": args.label, "machine": describe(machine()), "command": base[3:], "runs": runs}
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
