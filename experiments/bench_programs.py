"""How many programs the study compiles, and what a rerun with a new learning rate costs
(a benchmark, not a test). Run it on the code before and after a change, on one machine:

    python experiments/bench_programs.py study                      # distinct programs of the study
    python experiments/bench_programs.py compile --cache DIR        # the CartPole grid, a fresh cache
    python experiments/bench_programs.py compile --cache DIR --lr-scale 2   # again, only lr changed

``study`` counts the distinct keys of the study's program cache (``study.programs.cached``)
over the reproduction study (``experiments/reproduce.py``: 3 domains x 2 budgets, and the
schedules study), as ``study.compiled.Prepared`` builds them: ``cached`` is replaced by a
recorder, so nothing compiles. Each setting of the study is one process, so a program two
settings share is compiled once only through JAX's persistent cache, whose key is the
program itself: the count is that of the programs the persistent cache holds after the study.

``compile`` builds the families of one domain's grid (``Prepared``, ``--env``, ``--budget``,
10 seeds) with JAX's persistent cache in ``--cache`` (every program written, however quick)
and prints per family the compile seconds and JAX's counts: XLA compiles, persistent cache
hits and misses. A second process with ``--lr-scale`` (every algorithm's learning rate
times it, nothing else) says what a user who changes a learning rate and runs again pays.
``--json FILE`` appends the figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import time
import warnings

STUDY = (("cartpole", "short", False), ("inventory", "short", False), ("inventory3d", "short", False),
         ("inventory", "short", True), ("cartpole", "long", False), ("inventory", "long", False),
         ("inventory3d", "long", False))  # fmt: skip
SEEDS = 10


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    return f"{os.cpu_count()} CPU(s), {model}, {platform.platform()}"


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

    from rcmdp_jax import family
    from rcmdp_jax.study import compiled

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
    from rcmdp_jax.study.compiled import Prepared

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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("study", "compile"))
    ap.add_argument("--env", default="cartpole")
    ap.add_argument("--budget", default="short")
    ap.add_argument("--lr-scale", type=float, default=1.0)
    ap.add_argument("--algos", help="comma-separated algorithms (compile; default: the 14 of the study)")
    ap.add_argument("--cache", help="the persistent compilation cache's folder (compile)")
    ap.add_argument("--label", default="", help="a name for these figures in --json (e.g. before, after)")
    ap.add_argument("--json", help="append the figures to this JSON file")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.what == "study":
        res = count_study()
    else:
        if not args.cache:
            ap.error("compile needs --cache DIR")
        res = compile_grid(args.env, args.budget, args.lr_scale, args.cache, args.algos and args.algos.split(","))
    res = dict(what=args.what, label=args.label, env=args.env, budget=args.budget, lr_scale=args.lr_scale, algos=args.algos,
               machine=machine(), code=os.environ.get("PYTHONPATH", "installed"), **res)  # fmt: skip
    print(json.dumps(res, indent=1))
    if args.json:
        old = json.load(open(args.json)) if os.path.exists(args.json) else []
        with open(args.json, "w") as f:
            json.dump(old + [res], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
