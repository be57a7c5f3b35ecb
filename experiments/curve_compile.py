"""The training curve's share of a program's compile (a benchmark, not a test): compile CPU
seconds of ``jax.jit(jax.vmap(make_train(preset("cartpole", ALGO))))`` (10 seeds) with the
curve's evaluation (``evaluate.curve_point``) and without it (replaced by NaNs of its shapes),
each in a fresh process without the persistent cache: the most an evaluation program shared by
every family of a study could save per family (docs/performance.md).

    python experiments/curve_compile.py [--repeats 2] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(mode: str, algo: str) -> dict:
    """Compile one program in this process (``mode``: "with" or "without" the curve)."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import preset
    from rcmdp_jax import step as step_module
    from rcmdp_jax.train import make_train

    if mode == "without":
        real = step_module.curve_point

        def nothing(*args):
            shapes = jax.eval_shape(lambda: real(*args))
            return jax.tree.map(lambda s: jnp.full(s.shape, jnp.nan, s.dtype), shapes)

        step_module.curve_point = nothing
    keys = jax.random.split(jax.random.PRNGKey(0), 10)
    lowered = jax.jit(jax.vmap(make_train(preset("cartpole", algo)))).lower(keys)
    t0, w0 = cpu_s(), time.perf_counter()
    compiled = lowered.compile()
    return dict(mode=mode, algo=algo, compile_cpu_s=round(cpu_s() - t0, 2), wall_s=round(time.perf_counter() - w0, 2),
                hlo_chars=len(compiled.as_text()))  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--algos", default="PPO-Lag,MDPO-Robust-Lag,RMCPMD-Lag")
    p.add_argument("--out", default=None, help="append each result as a JSON line")
    p.add_argument("--one", nargs=2, metavar=("MODE", "ALGO"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "0"}
    for _ in range(args.repeats):
        for algo in args.algos.split(","):
            for mode in ("with", "without"):
                out = subprocess.run([sys.executable, __file__, "--one", mode, algo], env=env, check=True,
                                     capture_output=True, text=True).stdout.strip().splitlines()[-1]  # fmt: skip
                print(out, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(out + "\n")


if __name__ == "__main__":
    main()
