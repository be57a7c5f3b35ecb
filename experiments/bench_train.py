"""Training throughput of the fused train step (not a test).

    python experiments/bench_train.py [--algo MDPO-Robust-Lag] [--seeds 1,10,100] [--json out.json]

For each number of vmapped seeds: compile time (reported apart), then the
median wall time of ``--repeats`` timed runs after one warm-up run, policy
env-steps per second and all samples per second (policy + dual + LTMA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import numpy as np

# rcmdp_jax is imported inside the functions: importing it starts JAX's backends
# (through gymnax), and --cpu-devices must act before that.


def _time(compiled, args, repeats):
    result = jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        result = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return result, statistics.median(times), times


def _peak_bytes(compiled):
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return int(
        getattr(mem, "temp_size_in_bytes", 0) + getattr(mem, "argument_size_in_bytes", 0)
        + getattr(mem, "output_size_in_bytes", 0)
    )  # fmt: skip


def _row(env, algo, n_seeds, cfg, compile_s, wall, times, result, compiled):
    m = result.metrics
    policy = float(np.asarray(m["policy_steps"])[:, -1].sum())
    total = policy + float(np.asarray(m["dual_steps"])[:, -1].sum() + np.asarray(m["ltma_steps"])[:, -1].sum())
    return {
        "env": env,
        "algorithm": algo,
        "seeds": n_seeds,
        "steps_per_seed": int(cfg.num_iterations * cfg.batch_size),
        "compile_s": compile_s,
        "wall_s": wall,
        "wall_s_all": times,
        "policy_steps_per_s": policy / wall,
        "all_samples_per_s": total / wall,
        "xla_peak_bytes": _peak_bytes(compiled),
    }


def bench_train(env: str, algo: str, n_seeds: int, repeats: int = 3, steps: int | None = None,
                rolled_threefry: bool = False, devices: int = 1) -> dict:  # fmt: skip
    """``rolled_threefry=True`` measures JAX's default CPU lowering of threefry (the
    baseline of ``rcmdp_jax.cpu_prng``); the lowering is restored afterwards.
    ``devices > 1`` shards the seeds over that many local devices (on a CPU, start
    the process with ``--cpu-devices``)."""
    from rcmdp_jax import cpu_prng, make_train, preset
    from rcmdp_jax.sharding import local_mesh, shard_batch

    overrides = {} if steps is None else {"total_timesteps": steps}
    cfg = preset(env, algo, **overrides)
    keys = jax.random.split(jax.random.PRNGKey(0), n_seeds)
    if devices > 1:
        if n_seeds % devices:
            raise ValueError(f"seeds={n_seeds} must be a multiple of devices={devices} here")
        keys = shard_batch(keys, local_mesh(devices))
    if rolled_threefry:
        cpu_prng.use_rolled_threefry()
    else:
        cpu_prng.apply_default()
    try:
        t0 = time.perf_counter()
        compiled = jax.jit(jax.vmap(lambda k: make_train(cfg)(k))).lower(keys).compile()
        compile_s = time.perf_counter() - t0
    finally:
        cpu_prng.apply_default()
    result, wall, times = _time(compiled, (keys,), repeats)
    row = _row(env, algo, n_seeds, cfg, compile_s, wall, times, result, compiled)
    row["threefry"] = "rolled (JAX default)" if rolled_threefry else "unrolled (the runner's default)"
    row["devices"] = devices
    return row


def bench_family(env: str, algos: list[str], n_seeds: int, repeats: int = 3) -> dict:
    """Several algorithms x seeds in one program (``rcmdp_jax.family``), as the runner trains them."""
    import jax.numpy as jnp

    from rcmdp_jax import make_family, preset

    cfgs = [preset(env, a) for a in algos]
    family = make_family(cfgs)
    members = jnp.repeat(jnp.arange(len(algos)), n_seeds)
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(0), n_seeds), (len(algos), 1))
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(family)).lower(keys, members).compile()
    compile_s = time.perf_counter() - t0
    result, wall, times = _time(compiled, (keys, members), repeats)
    return _row(env, "+".join(algos), n_seeds, cfgs[0], compile_s, wall, times, result, compiled)


def bench_sweep(algo: str = "MDPO-Robust-Lag", n_seeds: int = 10, repeats: int = 3, devices: int = 1) -> dict:
    """The full 11 x 16 x 100-episode CartPole sweep of ``n_seeds`` policies; with
    ``devices > 1`` sharded as the runner does (``sharding.sharded_blocks``)."""
    from rcmdp_jax import make_train, preset
    from rcmdp_jax.evaluate import make_eval
    from rcmdp_jax.sharding import local_mesh, sharded_blocks

    cfg = preset("cartpole", algo, total_timesteps=1600)
    result = jax.jit(jax.vmap(make_train(cfg)))(jax.random.split(jax.random.PRNGKey(0), n_seeds))
    params = result.state.params["actor"]
    sweep = make_eval(cfg)
    env = sweep.env

    if devices > 1:
        fn = sharded_blocks(sweep.from_keys, local_mesh(devices))
    else:
        fn = jax.jit(sweep.from_keys)
    keys = [jax.random.split(jax.random.PRNGKey(1 + r), n_seeds) for r in range(repeats + 1)]
    t0 = time.perf_counter()
    jax.block_until_ready(fn(params, keys[0]))  # compile + warm-up
    compile_s = time.perf_counter() - t0
    times = []
    for r in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(params, keys[1 + r]))
        times.append(time.perf_counter() - t)
    wall = statistics.median(times)
    # steps actually taken: an episode's discounted return with reward 1 per step gives its length
    gamma = cfg.hparams.gamma
    v = np.asarray(out["V"], np.float64)
    lengths = np.log(np.clip(1.0 - v * (1.0 - gamma), 1e-12, None)) / np.log(gamma)
    steps = float(np.round(lengths).sum())
    return {
        "algorithm": algo,
        "seeds": n_seeds,
        "episodes": int(v.size),
        "episode_steps": steps,
        "max_steps": int(v.size * env.episode_length),
        "compile_s": compile_s,
        "compile_note": "compile + one warm-up run",
        "wall_s": wall,
        "episode_steps_per_s": steps / wall,
        "devices": devices,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="cartpole")
    p.add_argument("--algo", default="MDPO-Robust-Lag")
    p.add_argument("--seeds", default="1,10,100")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="policy steps per seed (default: short budget)")
    p.add_argument("--json", default="bench_results/bench_train.json")
    p.add_argument("--sweep", action="store_true", help="also time the CartPole robustness sweep (10 seeds)")
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=1,
        help="split the CPU into N XLA devices and shard the seeds over them (default 1)",
    )
    args = p.parse_args(argv)
    if args.cpu_devices > 1:
        from rcmdp_jax.sharding import split_cpu

        if not split_cpu(args.cpu_devices) and len(jax.devices()) < args.cpu_devices:
            raise SystemExit(f"--cpu-devices {args.cpu_devices}: JAX already started with {len(jax.devices())}")
    from rcmdp_jax import cpu_prng

    cpu_prng.apply_default()  # as the runner does
    rows, sweep = [], None
    if args.sweep:
        sweep = bench_sweep(args.algo, 10, args.repeats, devices=args.cpu_devices)
        print(f"sweep 10 seeds x 11 x 16 x 100 episodes on {args.cpu_devices} device(s): "
              f"run {sweep['wall_s']:.2f}s episode steps/s {sweep['episode_steps_per_s']:,.0f}", flush=True)  # fmt: skip
    for n in (int(x) for x in args.seeds.split(",") if x.strip()):
        row = bench_train(args.env, args.algo, n, args.repeats, args.steps, devices=args.cpu_devices)
        rows.append(row)
        print(f"{args.algo} on {args.env}, {n:4d} seeds: compile {row['compile_s']:6.1f}s  "
              f"run {row['wall_s']:7.2f}s  policy steps/s {row['policy_steps_per_s']:12,.0f}  "
              f"all samples/s {row['all_samples_per_s']:12,.0f}", flush=True)  # fmt: skip
    from pathlib import Path

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    from launch import machine  # experiments/launch.py

    Path(args.json).write_text(json.dumps({"machine": machine(devices=True), "train": rows, "sweep": sweep}, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
