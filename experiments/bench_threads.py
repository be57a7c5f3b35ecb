"""Each thread's CPU seconds while the quick start trains (a measurement, not a test): the command
(``rcmdp --env gymnax:CartPole-v1 --algos PPO-Lag,PPO-Robust-Lag --seeds 3 --plots off``) in a new
process on ``--compile-cache CACHE``, its threads' CPU seconds (``/proc/PID/task``) and the process's
page faults, context switches and resident memory read at its first progress line and at its last
(``100.0%``): the training between. Run it on a fresh cache (the process compiles) and again with
``--set lr=0.0006`` (it loads the stored program) to compare the two processes' training::

    python experiments/bench_threads.py CACHE OUT_DIR [more rcmdp options]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

QUICK = ["--env", "gymnax:CartPole-v1", "--algos", "PPO-Lag,PPO-Robust-Lag", "--seeds", "3", "--plots", "off"]


def process(pid: int) -> dict:
    """The process's page faults, context switches and resident memory (kB)."""
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2 :].split()
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    return {"minor_faults": int(fields[7]), "major_faults": int(fields[9]),
            "voluntary_switches": int(status["voluntary_ctxt_switches"]),
            "involuntary_switches": int(status["nonvoluntary_ctxt_switches"]),
            "rss_kb": int(status["VmRSS"].split()[0])}  # fmt: skip


def threads(pid: int) -> dict:
    """``{thread id: (name, CPU seconds)}`` of the process's threads now."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:  # a thread that ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (stat[stat.index("(") + 1 : stat.rindex(")")], (int(fields[11]) + int(fields[12])) / tick)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "rcmdp_jax", *QUICK, "--compile-cache", argv[0], "--out", argv[1], *argv[2:]]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    start = end = None
    for line in proc.stdout:
        t = time.perf_counter() - t0
        if start is None and re.search(r"%\s+elapsed", line):
            start = (t, process(proc.pid), threads(proc.pid))
        if start is not None and end is None and "100.0%" in line:
            end = (t, process(proc.pid), threads(proc.pid))
        if re.search(r"compiled in|loaded compiled program|100\.0%", line):
            print(f"{t:6.1f} s  {line.rstrip()}")
    if proc.wait() != 0 or start is None or end is None:
        print(f"the command failed (exit {proc.returncode}) or printed no progress", file=sys.stderr)
        return 1
    print(f"training: {end[0] - start[0]:.1f} s wall;",
          {k: end[1][k] - start[1][k] for k in start[1] if k != "rss_kb"}, f"resident at its end {end[1]['rss_kb']} kB")  # fmt: skip
    spent = sorted(
        ((c - start[2].get(tid, (name, 0.0))[1], name, tid) for tid, (name, c) in end[2].items()), reverse=True
    )
    print(f"{len(spent)} threads, {sum(s for s, _, _ in spent):.1f} CPU s in all; the busiest:")
    for seconds, name, tid in spent[:6]:
        print(f"  {seconds:7.2f} CPU s  {name} (thread {tid})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
