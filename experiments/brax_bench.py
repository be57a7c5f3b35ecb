"""Training steps per second on a brax environment: our PPO-Lag (the fused train step) against
brax's own PPO (``brax.training.agents.ppo``) on the same environment and pipeline, in one run.

    python experiments/brax_bench.py [--env inverted_pendulum] [--steps 16000] [--json out.json]

Ours: the ``brax:ENV`` preset's PPO-Lag at each of ``--seeds`` vmapped seeds, compiled
first (compile time reported apart), then the median of ``--repeats`` timed runs after a
warm-up (``experiments/bench_train.py``). brax's: its ``ppo.train`` on
``brax.envs.get_environment(ENV, backend=...)`` with the same episode length, its own
``training/sps`` (environment steps per second of the training phase, compile excluded),
at the batch shapes given below (brax's PPO wants many parallel envs: ``--brax-envs``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def _replicate_on_one_device():
    """brax 0.14.2's PPO calls ``jax.device_put_replicated``, which JAX 0.10 removed: the same
    placement for one device (a leading axis of 1 on it), enough for this single-device bench."""
    import jax
    import jax.numpy as jnp

    def replicated(x, devices):
        if len(devices) != 1:
            raise ValueError("brax_bench.py replicates onto one device only")
        return jax.device_put(jax.tree.map(lambda a: jnp.asarray(a)[None], x), devices[0])

    try:
        jax.device_put_replicated  # noqa: B018
    except AttributeError:
        jax.device_put_replicated = replicated


def brax_ppo(env_name: str, backend: str, episode_length: int, steps: int, num_envs: int) -> dict:
    from brax import envs as benvs
    from brax.training.agents.ppo import train as ppo

    _replicate_on_one_device()

    env = benvs.get_environment(env_name, backend=backend)
    seen = []
    t0 = time.perf_counter()
    ppo.train(environment=env, num_timesteps=steps, episode_length=episode_length, num_envs=num_envs,
              batch_size=num_envs, num_minibatches=4, unroll_length=20, num_updates_per_batch=4,
              learning_rate=1e-3, discounting=0.99, num_evals=3, seed=0,
              progress_fn=lambda step, metrics: seen.append((step, dict(metrics))))  # fmt: skip
    wall = time.perf_counter() - t0
    sps = [float(m["training/sps"]) for _, m in seen if "training/sps" in m]
    return {"who": "brax ppo", "num_envs": num_envs, "steps": int(seen[-1][0]), "wall_s_with_compile": wall,
            "training_sps": sps, "eval_return": float(seen[-1][1].get("eval/episode_reward", float("nan")))}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="inverted_pendulum")
    ap.add_argument("--steps", type=int, default=16_000, help="policy steps of our run (one seed)")
    ap.add_argument("--seeds", default="1", help="vmapped seeds of our runs, one run each (e.g. 1,10; '' for none)")
    ap.add_argument("--brax-steps", type=int, default=200_000)
    ap.add_argument("--brax-envs", default="256", help="brax PPO's parallel envs, one run each (e.g. 16,256; '' for none)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import jax
    from bench_train import bench_train
    from launch import machine
    from rcmdp_jax.envs.brax_presets import parse_brax_name

    from rcmdp_jax import envs

    name = envs.BRAX_PREFIX + args.env
    pre, _, _, backend = parse_brax_name(name)
    rows = []
    for n in (int(x) for x in args.seeds.split(",") if x):
        row = bench_train(name, "PPO-Lag", n, repeats=args.repeats, steps=args.steps)
        row["who"] = "rcmdp_jax PPO-Lag"
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("who", "seeds", "compile_s", "wall_s", "policy_steps_per_s")}), flush=True)
    for n in (int(x) for x in args.brax_envs.split(",") if x):
        row = brax_ppo(args.env, backend, pre.episode_length, args.brax_steps, n)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"env": name, "backend": backend, "episode_length": pre.episode_length, "machine": machine(devices=True),
           "jax": jax.__version__, "rows": rows}  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
