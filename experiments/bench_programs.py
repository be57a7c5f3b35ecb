"""How many programs the study compiles, and what a rerun with a new learning rate costs
(a benchmark, not a test). Run it on the code before and after a change, on one machine:

    python experiments/bench_programs.py study                      # distinct programs of the study
    python experiments/bench_programs.py compile --cache DIR        # the CartPole grid, a fresh cache
    python experiments/bench_programs.py compile --cache DIR --lr-scale 2   # again, only lr changed

``study`` counts the distinct keys of the study's program cache (``chunked.cached``)
over the reproduction study (``experiments/reproduce.py``: 3 domains x 2 budgets, and the
schedules study), as ``chunked.Prepared`` builds them: ``cached`` is replaced by a
recorder, so nothing compiles. Each setting of the study is one process, so a program two
settings share is compiled once only through JAX's persistent cache, whose key is the
program itself: the count is that of the programs the persistent cache holds after the study.

``compile`` builds the families of one domain's grid (``Prepared``, ``--env``, ``--budget``,
10 seeds) with JAX's persistent cache in ``--cache`` (every program written, however quick)
and prints per family the compile seconds and JAX's counts: XLA compiles, persistent cache
hits and misses. A second process with ``--lr-scale`` (every algorithm's learning rate
times it, nothing else) says what a user who changes a learning rate and runs again pays.
``--json FILE`` appends the figures.

``tests`` runs README's test command (``python -m pytest tests -m "not slow"``, ``--workers``
xdist workers, 2 as README's) on the checkout ``--repo`` (default: this one) with JAX's compile
events logged per test, and prints what it compiled: ``programs`` (the distinct programs: the
entries of the session's persistent compilation cache, which every program of every process
goes into), ``compiles`` (XLA compiles: more than ``programs`` where two workers or a subprocess
compiled one program twice at once), their seconds, the trace and lowering seconds, the CPU
seconds of pytest and its workers (user and system: on a shared machine, steadier than the wall
time, which is given too), the persistent-cache hits (a program a process built again and did
not compile) and the heaviest tests by compile seconds. This file is the pytest plugin that logs (``-p bench_programs``), so
the count needs nothing of the checkout's ``conftest.py``: run it on the code before a change
(``git worktree add /tmp/before COMMIT``, then ``--repo /tmp/before``; the checkout's own package is
imported, whichever the interpreter has installed) and after::

    python experiments/bench_programs.py tests --repo /tmp/before --label before --json FILE
    python experiments/bench_programs.py tests --label after --json FILE
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

STUDY = (("cartpole", "short", False), ("inventory", "short", False), ("inventory3d", "short", False),
         ("inventory", "short", True), ("cartpole", "long", False), ("inventory", "long", False),
         ("inventory3d", "long", False))  # fmt: skip
SEEDS = 10


def machine() -> str:
    """The machine in words, ``experiments/launch.py``'s (``2-core AMD EPYC ...``)."""
    from launch import describe
    from launch import machine as measured_on

    return describe(measured_on())


def grid(env: str, budget: str, schedules: bool, lr_scale: float = 1.0, algos=None) -> dict:
    """The study's configs of one setting, ``{algorithm: Config}`` (``lr`` times ``lr_scale``;
    ``algos``: these algorithms only)."""
    from rcmdp_jax import preset
    from rcmdp_jax.presets import ALGORITHMS, schedule_variants

    algos = algos or (schedule_variants() if schedules else ALGORITHMS)
    cfgs = {a: preset(env, a, budget) for a in algos}
    return {a: c.replace(lr=c.hparams.lr * lr_scale) if lr_scale != 1.0 else c for a, c in cfgs.items()}


def count_study() -> dict:
    """Distinct program-cache keys of the whole study (nothing is compiled)."""
    import numpy as np

    from rcmdp_jax import chunked as compiled
    from rcmdp_jax import family

    keys, per_setting = set(), {}
    compiled.cached = lambda key, build: keys.add(key) or (None, None)  # record, do not build
    for env, budget, schedules in STUDY:
        before = len(keys)
        cfgs = grid(env, budget, schedules)
        groups = family.group(cfgs)
        for g in groups:
            compiled.Prepared([cfgs[a] for a in g], np.zeros((SEEDS, 2), np.uint32), True)
        name = f"{'schedules-' if schedules else ''}{env}-{budget}"
        per_setting[name] = dict(families=len(groups), new_programs=len(keys) - before)
    return dict(programs=len(keys), settings=per_setting)


class Counter:
    """JAX's compile events, counted (``jax.monitoring``)."""

    EVENTS = {"/jax/core/compile/backend_compile_duration": "compiles",
              "/jax/compilation_cache/cache_hits": "cache_hits",
              "/jax/compilation_cache/cache_misses": "cache_misses"}  # fmt: skip

    def __init__(self):
        import jax

        self.n = collections.Counter()
        jax.monitoring.register_event_listener(lambda e, **kw: self.add(e))
        jax.monitoring.register_event_duration_secs_listener(lambda e, s, **kw: self.add(e))

    def add(self, event: str) -> None:
        if event in self.EVENTS:
            self.n[self.EVENTS[event]] += 1

    def take(self) -> dict:
        out = {k: self.n[k] for k in self.EVENTS.values()}
        self.n.clear()
        return out


def compile_grid(env: str, budget: str, lr_scale: float, cache: str, algos=None) -> dict:
    import jax
    import numpy as np

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    from rcmdp_jax import family
    from rcmdp_jax.chunked import Prepared

    counter = Counter()
    cfgs = grid(env, budget, False, lr_scale, algos)
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(0), SEEDS))
    counter.take()
    out, t0 = {}, time.perf_counter()
    for g in family.group(cfgs):
        prep = Prepared([cfgs[a] for a in g], keys, True)
        out[",".join(g)] = dict(compile_s=round(prep.compile_s, 1), **counter.take())
        print(g[0], "...", out[",".join(g)], flush=True)
    total = {k: sum(v[k] for v in out.values()) for k in ("compiles", "cache_hits", "cache_misses")}
    return dict(families=out, total_compile_s=round(time.perf_counter() - t0, 1), **total)


LOG_ENV = "RCMDP_JAX_BENCH_COMPILE_LOG"


def log_compiles(folder: str) -> None:
    """One line per compile event of this process, ``test  event  seconds  function``, to
    ``folder/PID.tsv`` (the test from ``PYTEST_CURRENT_TEST``): ``backend_compile_duration`` times
    every request that reached XLA's stage, a persistent-cache hit too (a ``cache_hits`` line
    before it, then ``compile_time_saved_sec``); a ``cache_misses`` line before it marks a
    program XLA compiled (it is logged as the program is written to the cache). Also
    ``tests/conftest.py``'s ``RCMDP_JAX_TEST_COMPILE_LOG``."""
    import jax.monitoring

    def line(event: str, seconds: float, fun_name: str = "-") -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "-").rsplit(" ", 1)[0]
        with open(Path(folder) / f"{os.getpid()}.tsv", "a") as f:
            f.write(f"{test}\t{event.rsplit('/', 1)[1]}\t{seconds:.3f}\t{fun_name}\n")

    def timed(event, seconds, fun_name="-", **_):
        if event.startswith("/jax/core/compile/") or event.endswith("compile_time_saved_sec"):
            line(event, seconds, fun_name)

    jax.monitoring.register_event_duration_secs_listener(timed)
    jax.monitoring.register_event_listener(lambda e, **_: e.endswith(("/cache_misses", "/cache_hits")) and line(e, 0.0))


def pytest_configure(config) -> None:
    """As a pytest plugin (``-p bench_programs``, in every xdist worker): ``log_compiles`` into
    ``LOG_ENV``'s folder when set, registered after the checkout's conftest.py set JAX's cache
    and flags (importing JAX earlier would miss them)."""
    if os.environ.get(LOG_ENV):
        log_compiles(os.environ[LOG_ENV])


def read_compile_log(folder: str) -> tuple[dict, dict]:
    """The logs of ``pytest_configure`` summed: totals, and per test its XLA compiles and their
    seconds, persistent-cache hits, trace and lowering seconds."""
    per: dict = collections.defaultdict(collections.Counter)
    for path in Path(folder).glob("*.tsv"):
        before = "nocache"  # what preceded a compile's duration: its cache miss or hit
        for row in path.read_text().splitlines():
            test, event, seconds, _ = row.split("\t")
            c = per[test]
            if event in ("cache_misses", "cache_hits"):
                before = event
            elif event == "backend_compile_duration":  # a hit too: the read from the cache
                kind = {"cache_misses": "compiles", "cache_hits": "hits"}.get(before, "uncached")
                c[kind] += 1
                c[kind + "_s"] += float(seconds)
                before = "nocache"
            elif event == "jaxpr_trace_duration":
                c["trace_s"] += float(seconds)
            elif event == "jaxpr_to_mlir_module_duration":
                c["lower_s"] += float(seconds)
    total = collections.Counter()
    for c in per.values():
        total.update(c)
    return dict(total), per


def run_tests(repo: str, workers: int, extra: list[str], top: int, keep_log: str | None = None) -> dict:
    """README's test command on ``repo`` with the compile log: what it compiled (``tests``);
    ``keep_log``: a folder to keep the log in (one ``PID.tsv`` a process)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench_tests_"))
    log, xla, runs = Path(keep_log) if keep_log else tmp / "log", tmp / "xla", tmp / "runs"
    for d in (log, xla, runs):
        d.mkdir(exist_ok=d == log)
    env = dict(os.environ, RCMDP_JAX_TEST_XLA_CACHE=str(xla), RCMDP_JAX_TEST_SHARED_RUNS=str(runs))
    env[LOG_ENV] = str(log)
    env.pop("RCMDP_JAX_TEST_COMPILE_LOG", None)  # the checkout's own log, if it has one, off
    path = [str(Path(__file__).resolve().parent)]  # this plugin
    pkg = tmp / "pkg" / "rcmdp_jax"  # that checkout's package, whichever one the interpreter has installed
    pkg.mkdir(parents=True)
    for item in (Path(repo) / "src" / "rcmdp_jax").iterdir():
        (pkg / item.name).symlink_to(item.resolve())
    (pkg / "envs").symlink_to((Path(repo) / "envs").resolve())
    path.append(str(pkg.parent))
    env["PYTHONPATH"] = os.pathsep.join(path + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, "-m", "pytest", "tests", "-m", "not slow", "-n", str(workers), "-p", "bench_programs",
           "-p", "no:cacheprovider", *extra]  # fmt: skip
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = [ln for ln in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    total, per = read_compile_log(str(log))
    heaviest = sorted(per.items(), key=lambda kv: -kv[1]["compiles_s"])[:top]
    out = dict(repo=str(Path(repo).resolve()), workers=workers, exit=proc.returncode, pytest=summary[-1:],
               wall_s=round(wall, 1), cpu_s=round(cpu.ru_utime + cpu.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1),
               programs=sum(1 for p in xla.iterdir() if p.name.endswith("-cache")),
               compiles=total.get("compiles", 0), compile_s=round(total.get("compiles_s", 0.0), 1),
               cache_hits=total.get("hits", 0), trace_s=round(total.get("trace_s", 0.0), 1),
               lower_s=round(total.get("lower_s", 0.0), 1),
               heaviest={t: dict(compiles=c["compiles"], compile_s=round(c["compiles_s"], 1)) for t, c in heaviest})  # fmt: skip
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("study", "compile", "tests"))
    ap.add_argument("--env", default="cartpole")
    ap.add_argument("--budget", default="short")
    ap.add_argument("--lr-scale", type=float, default=1.0)
    ap.add_argument("--algos", help="comma-separated algorithms (compile; default: the 14 of the study)")
    ap.add_argument("--cache", help="the persistent compilation cache's folder (compile)")
    ap.add_argument("--label", default="", help="a name for these figures in --json (e.g. before, after)")
    ap.add_argument("--json", help="append the figures to this JSON file")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent), help="the checkout to test (tests)")
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (tests; 0: one process)")
    ap.add_argument("--top", type=int, default=15, help="the heaviest tests to list (tests)")
    ap.add_argument("--pytest", default="", help="more pytest arguments, one string (tests)")
    ap.add_argument("--log", help="keep the compile log in this folder (tests)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.what == "study":
        res = count_study()
    elif args.what == "tests":
        res = run_tests(args.repo, args.workers, shlex.split(args.pytest), args.top, args.log)
    else:
        if not args.cache:
            ap.error("compile needs --cache DIR")
        res = compile_grid(args.env, args.budget, args.lr_scale, args.cache, args.algos and args.algos.split(","))
    if args.what == "tests":  # the checkout tested and its commit (``repo`` in ``res``)
        commit = subprocess.run(
            ["git", "-C", args.repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        res = dict(what=args.what, label=args.label, machine=machine(), commit=commit.stdout.strip(), **res)
    else:
        res = dict(what=args.what, label=args.label, env=args.env, budget=args.budget, lr_scale=args.lr_scale,
                   algos=args.algos, machine=machine(), code=os.environ.get("PYTHONPATH", "installed"), **res)  # fmt: skip
    print(json.dumps(res, indent=1))
    if args.json:
        old = json.load(open(args.json)) if os.path.exists(args.json) else []
        with open(args.json, "w") as f:
            json.dump(old + [res], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
