"""Time to build a vmapped training program, with and without the loops' carries put on the
lanes first (``batching.carried_on_lanes``), in one run (a benchmark, not a test).

    python experiments/bench_trace.py [--envs cartpole,inventory,inventory3d] [--compile inventory]
                                      [--json docs/bench_trace_cpu_2core.json]

For every domain, the study's presets (their default budgets and batch shapes) as the
programs users build: ``jax.jit(jax.vmap(make_train(cfg)))`` over 10 seeds (MDPO-Robust-Lag),
and each algorithm family of the grid vmapped over its members (``family.make_family``, the
command's ``--vmap`` program before its sharding). Each program is traced and lowered to
StableHLO twice: ``before``, with ``carried_on_lanes`` replaced by the identity where the
library calls it (the loop carries enter as they are and JAX's fixpoint batches a loop body
again when a carry leaves batched), and ``after``, as shipped. For the domains in
``--compile`` XLA's compile time is measured too (the helper changes which values carry a
lane axis, not the work: the compile should not move). ``lines``: the StableHLO program's
length, which the helper changes only by the broadcasts it adds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USERS = ("rcmdp_jax.step", "rcmdp_jax.learners.batch", "rcmdp_jax.learners.mcpmd", "rcmdp_jax.ltma")


@contextlib.contextmanager
def without_carried_on_lanes():
    """Every module that calls ``carried_on_lanes`` gets the identity instead."""
    import importlib

    modules = [importlib.import_module(m) for m in USERS]
    saved = [m.carried_on_lanes for m in modules]
    for m in modules:
        m.carried_on_lanes = lambda carry, like: carry
    try:
        yield
    finally:
        for m, f in zip(modules, saved):
            m.carried_on_lanes = f


def build(fn, args, compile_too: bool) -> dict:
    t0 = time.perf_counter()
    traced = fn.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    out = {"trace_s": round(t1 - t0, 2), "lower_s": round(t2 - t1, 2), "lines": lowered.as_text().count("\n")}
    if compile_too:
        lowered.compile()
        out["compile_s"] = round(time.perf_counter() - t2, 2)
    return out


def programs(env_name: str):
    """``(name, function, args)`` of the domain's programs."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import ALGORITHMS, make_train, preset
    from rcmdp_jax.family import group, make_family

    seeds = jax.random.split(jax.random.PRNGKey(0), 10)
    cfg = preset(env_name, "MDPO-Robust-Lag")
    yield "MDPO-Robust-Lag x 10 seeds", jax.jit(jax.vmap(make_train(cfg))), (seeds,)
    configs = {a: preset(env_name, a) for a in ALGORITHMS}
    for names in group(configs):
        family = make_family([configs[a] for a in names])
        lanes = jnp.arange(len(names))
        yield f"{names[0]} family x{len(names)}", jax.jit(jax.vmap(family, in_axes=(None, 0))), (seeds[0], lanes)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="cartpole,inventory,inventory3d")
    parser.add_argument("--compile", default="inventory", help="domains whose programs are compiled too ('' for none)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    import jax

    from rcmdp_jax import make_train, preset

    warm = preset("cartpole", "MDPO-Lag", total_timesteps=64, n_steps=16, minibatch_size=16)
    jax.jit(jax.vmap(make_train(warm))).trace(jax.random.split(jax.random.PRNGKey(0), 2))  # JAX's first-use costs
    rows = []
    for env_name in args.envs.split(","):
        compile_too = env_name in args.compile.split(",")
        # each program built twice (fresh functions: JAX caches what it traced per function)
        for (name, fn, fargs), (_, fn2, _) in zip(programs(env_name), programs(env_name)):
            with without_carried_on_lanes():
                before = build(fn, fargs, compile_too)
            after = build(fn2, fargs, compile_too)
            row = {"env": env_name, "program": name, "before": before, "after": after}
            row["trace_ratio"] = round(after["trace_s"] / before["trace_s"], 2)
            rows.append(row)
            print(f"{env_name:11s} {name:28s} trace {before['trace_s']:6.2f} -> {after['trace_s']:6.2f} s "
                  f"({row['trace_ratio']:.2f}x)  lower {before['lower_s']:.2f} -> {after['lower_s']:.2f} s"
                  + (f"  compile {before['compile_s']:.1f} -> {after['compile_s']:.1f} s" if compile_too else ""),
                  flush=True)  # fmt: skip
    total = {k: round(sum(r[k]["trace_s"] for r in rows), 2) for k in ("before", "after")}
    print(f"tracing, every program: {total['before']:.1f} s -> {total['after']:.1f} s "
          f"({total['after'] / total['before']:.2f}x)")  # fmt: skip
    if args.json:
        meta = {"machine": platform.processor() or platform.machine(), "jax": jax.__version__,
                "xla_flags": __import__("os").environ.get("XLA_FLAGS", ""), "total_trace_s": total}  # fmt: skip
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
