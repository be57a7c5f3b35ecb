"""What XLA's backend optimisation level 1 (XLA's default is 2) does to a training program on the
CPU (a benchmark, not a test): for each environment and algorithm, ``jax.jit(jax.vmap(make_train(
preset(env, algo, total_timesteps=STEPS))))`` (10 seeds) lowered, compiled with
``compiler_options={"xla_backend_optimization_level": L}``, run once, then run again and timed;
each in a fresh process with JAX's persistent cache off. Prints one JSON line per program: the
compile's CPU seconds, the timed run's wall seconds, and a hash of every output array (equal
hashes: bit-identical outputs).

    python experiments/compile_level.py [--envs cartpole,inventory] [--algos PPO-Lag,...] [--steps 200000] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(env: str, algo: str, steps: int, level: int | None) -> dict:
    import jax
    import numpy as np

    from rcmdp_jax import make_train, preset

    keys = jax.random.split(jax.random.PRNGKey(0), 10)
    lowered = jax.jit(jax.vmap(make_train(preset(env, algo, total_timesteps=steps)))).lower(keys)
    options = None if level is None else {"xla_backend_optimization_level": level}
    c0 = cpu_s()
    compiled = lowered.compile(compiler_options=options)
    compile_cpu = cpu_s() - c0
    jax.block_until_ready(compiled(keys))
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - t0
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(out))).hexdigest()[:16]
    return dict(env=env, algo=algo, steps=steps, level="default" if level is None else level,
                compile_cpu_s=round(compile_cpu, 1), run_s=round(run_s, 2), outputs=digest)  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", default="cartpole,inventory")
    p.add_argument("--algos", default="PPO-Lag,RMCPMD-Lag,MDPO-Robust-Lag")
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--out", default=None, help="append each result as a JSON line")
    p.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        env, algo, steps, level = args.one
        print(json.dumps(one(env, algo, int(steps), None if level == "default" else int(level))))
        return
    environ = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "0"}
    for env in args.envs.split(","):
        for algo in args.algos.split(","):
            for level in ("default", "1"):  # in turn: both meet the same load
                cmd = [sys.executable, __file__, "--one", env, algo, str(args.steps), level]
                line = subprocess.run(cmd, env=environ, check=True, capture_output=True, text=True).stdout
                line = line.strip().splitlines()[-1]
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
