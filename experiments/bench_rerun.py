"""What a user waits for on a first run and on a rerun that changes only a number (a benchmark,
not a test): the quick start (``rcmdp --env gymnax:CartPole-v1 --algos PPO-Lag,PPO-Robust-Lag
--seeds 3``) run twice in new processes on one fresh ``--compile-cache``, the second with only
``--set lr=...`` changed (``--change limit``: both runs with the safe-RL quick start's costs,
``--costs 'x>0.3:5'``, the second with another limit and budget, ``'x>0.2:10'``)::

    python experiments/bench_rerun.py --json FILE [--python /other/venv/bin/python --label before]

Each line the command prints is timed as it arrives. Per run: the seconds to its first line
(``rcmdp_jax: N algorithm run(s) ...``: imports, the plan, the run folder), from there to the
line that says the family's program is ready (``compiled in`` or ``loaded compiled program``),
and to its first progress line (the end of the first training chunk: the first iteration's
result is on the host), and the whole wall time. ``--python`` runs another checkout's
interpreter (the code before a change), ``--steps`` a shorter budget.

``--before CHECKOUT`` runs the code of another checkout (its ``src/rcmdp_jax`` and ``envs``, put
first on the path) beside this one's, interleaved in one session (before's first run, after's,
before's rerun, after's), so that both meet the same load: their ratios are the fair figure on
a shared machine. ``--job main`` times the main job (``experiments/run.py --seeds 10 --vmap``,
``--plots off``) instead of the quick start. Every run also sums JAX's compile events (tracing,
lowering, XLA's compiles and persistent-cache reads: ``compile_s``) and their share of the wall, and
the run's CPU seconds (user and system, with its children's: ``cpu_s``), which a loaded machine
inflates less than the wall.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = ["--env", "gymnax:CartPole-v1", "--algos", "PPO-Lag,PPO-Robust-Lag", "--seeds", "3", "--plots", "off"]
MAIN = ["--seeds", "10", "--vmap", "--plots", "off"]
COMPILE_EVENTS = ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration", "backend_compile_duration")


def command(log: str, argv: list[str]) -> int:
    """The command (``rcmdp``) in this process, JAX's compile seconds summed into ``log`` at exit."""
    import atexit

    from rcmdp_jax.study.console import split_cpu, train

    split_cpu()  # as the command does, before JAX starts
    import jax.monitoring

    total = dict.fromkeys(COMPILE_EVENTS, 0.0)

    def add(event, seconds, **_):
        if event.rsplit("/", 1)[1] in total:
            total[event.rsplit("/", 1)[1]] += seconds

    jax.monitoring.register_event_duration_secs_listener(add)
    atexit.register(lambda: Path(log).write_text(json.dumps(total)))
    return train(argv)


def package_path(checkout: str, work: Path) -> str:
    """A folder holding ``checkout``'s package (``rcmdp_jax`` and its ``envs``), for PYTHONPATH."""
    pkg = work / "pkg" / "rcmdp_jax"
    pkg.mkdir(parents=True)
    for item in (Path(checkout) / "src" / "rcmdp_jax").iterdir():
        (pkg / item.name).symlink_to(item.resolve())
    (pkg / "envs").symlink_to((Path(checkout) / "envs").resolve())
    return str(pkg.parent)


def timed(cmd: list[str], env: dict | None = None, log: Path | None = None) -> dict:
    """Run ``cmd``; the seconds at which its landmark lines arrived, and its wall time (``log``:
    where ``command`` writes the compile seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
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
    _, status, usage = os.wait4(proc.pid, 0)  # the run's CPU seconds: steadier than its wall on a shared machine
    rc = proc.returncode = os.waitstatus_to_exitcode(status)
    out = {"rc": rc, "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}
    out.update({k: round(v, 2) if isinstance(v, float) else v for k, v in marks.items()})
    if "first_line" in marks and "first_chunk" in marks:
        out["first_line_to_first_chunk_s"] = round(marks["first_chunk"] - marks["first_line"], 2)
    if log is not None and log.exists():
        seconds = json.loads(log.read_text())
        out["compile_s"] = round(sum(seconds.values()), 1)
        out["compile_share"] = round(out["compile_s"] / out["wall_s"], 3)
        names = dict(zip(COMPILE_EVENTS, ("trace_s", "lower_s", "xla_s")))
        out.update({names[k]: round(v, 1) for k, v in seconds.items()})
    if rc != 0:
        out["tail"] = lines[-5:]
    return out


def main() -> int:
    if sys.argv[1:2] == ["--command"]:  # one run (``timed`` starts it): the command, compile seconds logged
        return command(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", default=sys.executable, help="the interpreter whose rcmdp_jax runs (default: this one)")
    p.add_argument("--label", default="after")
    p.add_argument("--before", default=None, help="another checkout, run interleaved with this one (label 'before')")
    p.add_argument("--job", choices=("quick", "main"), default="quick")
    p.add_argument("--lr", default="0.0006", help="the rerun's --set lr=")
    p.add_argument("--change", choices=("lr", "limit"), default="lr",
                   help="what the rerun changes: the learning rate, or (the quick start) its cost's limit and budget")
    p.add_argument("--steps", default=None, help="a shorter budget (default: the preset's)")
    p.add_argument("--reverse", action="store_true", help="with --before: this checkout's run first in each pair")
    p.add_argument("--json", default=None, help="append the figures to this file")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_rerun_"))
    codes = {args.label: None}
    if args.before:
        codes = {"before": package_path(args.before, work / "before"), args.label: None}
        codes = dict(reversed(codes.items())) if args.reverse else codes
    job = QUICK if args.job == "quick" else MAIN
    if args.change == "limit" and args.job != "quick":
        p.error("--change limit is the quick start's (its --costs)")
    runs = {}
    reruns = {"lr": [("first", []), ("rerun_lr", ["--set", f"lr={args.lr}"])],
              "limit": [("first", ["--costs", "x>0.3:5"]), ("rerun_limit", ["--costs", "x>0.2:10"])]}
    for name, extra in reruns[args.change]:
        for label, path in codes.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p))
            cmd = [args.python, __file__, "--command", str(work / f"{label}-{name}.json"), *job]
            cmd += ["--compile-cache", str(work / f"cache-{label}"), "--out", str(work / label / name), *extra]
            cmd += ["--steps", args.steps] if args.steps else []
            runs[f"{label} {name}"] = timed(cmd, env, work / f"{label}-{name}.json")
            print(label, name, json.dumps(runs[f"{label} {name}"]), flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from launch import describe, machine

    def commit(checkout) -> str | None:  # the code each label ran, so the figures name it
        cmd = ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"]
        got = subprocess.run(cmd, capture_output=True, text=True)
        return got.stdout.strip() or None

    record = {"job": args.job, "change": args.change, "machine": describe(machine()), "command": job,
              "before": args.before, "runs": runs,
              "commits": {"after": commit(Path(__file__).resolve().parent.parent),
                          **({"before": commit(args.before)} if args.before else {})},
              "order": list(codes),
              "load_average": os.getloadavg()}  # fmt: skip
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
