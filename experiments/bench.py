"""Speed of rcmdp_jax against the PyTorch stack users would otherwise run (not a test).

    pip install -e ".[bench]"
    python experiments/bench.py                # training, sweep, SB3 baseline, ratios
    python experiments/bench.py --grid         # + the whole CartPole reference grid

Every figure is the median of ``--repeats`` timed runs after a warm-up; compile
time is reported apart. Results go to ``bench_results/bench.json``.
Without stable-baselines3/torch installed the baseline and the ratios are skipped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import bench_family, bench_sweep, bench_train  # noqa: E402
from launch import machine  # noqa: E402


def bench_sb3(repeats: int = 3, steps: int = 20_000, eval_episodes: int = 50) -> dict | None:
    """Stable-Baselines3 PPO on Gymnasium CartPole-v1 (100-step limit), docs/method.md §3 settings, CPU."""
    try:
        import gymnasium as gym
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as err:
        print(f"SB3 baseline skipped ({err}); install with: pip install -e '.[bench]'")
        return None
    torch.set_num_threads(max(1, torch.get_num_threads()))

    def make_model():
        venv = make_vec_env(lambda: gym.make("CartPole-v1", max_episode_steps=100), n_envs=4, seed=0)
        return PPO(
            "MlpPolicy", venv, n_steps=400, batch_size=32, n_epochs=5, learning_rate=3e-4,
            gamma=0.99, gae_lambda=0.95, policy_kwargs=dict(net_arch=dict(pi=[128], vf=[128])),
            device="cpu", seed=0, verbose=0,
        )  # fmt: skip

    make_model().learn(1600)  # warm-up
    train_times, model = [], None
    for _ in range(repeats):
        model = make_model()
        t = time.perf_counter()
        model.learn(steps)
        train_times.append((time.perf_counter() - t, model.num_timesteps))
    wall, n = sorted(train_times)[len(train_times) // 2]

    env = gym.make("CartPole-v1", max_episode_steps=100)
    eval_times = []
    for r in range(repeats):
        t, n_steps = time.perf_counter(), 0
        for ep in range(eval_episodes):
            obs, _ = env.reset(seed=1000 * r + ep)
            done = False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, _, term, trunc, _ = env.step(action)
                done = term or trunc
                n_steps += 1
        eval_times.append(n_steps / (time.perf_counter() - t))
    return {
        "train_steps": n,
        "train_wall_s": wall,
        "train_steps_per_s": n / wall,
        "eval_steps_per_s": statistics.median(eval_times),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def bench_sharded_cpu(devices: int, seeds: list[int], repeats: int) -> tuple[list[dict], dict]:
    """MDPO-Robust-Lag training and the sweep sharded over ``devices`` XLA CPU devices
    (a subprocess: the split must happen before JAX starts)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sharded.json"
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).parent / "bench_train.py"), "--cpu-devices", str(devices),
             "--seeds", ",".join(map(str, seeds)), "--repeats", str(repeats), "--json", str(out), "--sweep"],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        data = json.loads(out.read_text())
        return data["train"], data["sweep"]


def bench_grid(seeds: int = 10) -> dict:
    """Wall time of the whole CartPole reference grid (14 algorithms, short budget, full sweep)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grid"
        t = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).parent / "run.py"), "--seeds", str(seeds), "--vmap",
             "--out", str(out), "--compile-cache", "off"],
            capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        families = {}  # algorithms trained together share one timing
        for f in (out / "cartpole").glob("*/timing.json"):
            t = json.loads(f.read_text())
            families[tuple(t.get("family", [f.parent.name]))] = t
    return {
        "seeds": seeds,
        "wall_s": wall,
        "families": len(families),
        "compile_s_sum": sum(t["compile_s"] for t in families.values()),
        "train_s_sum": sum(t["train_s"] for t in families.values()),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="rcmdp_jax benchmarks")
    p.add_argument("--seeds", default=None, help="vmapped seeds for training (default 1,10,100 on CPU; +4096 on GPU)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--grid", action="store_true", help="also time the whole CartPole reference grid")
    p.add_argument("--skip-sb3", action="store_true")
    p.add_argument("--json", default="bench_results/bench.json")
    args = p.parse_args(argv)
    from rcmdp_jax import cpu_prng

    cpu_prng.apply_default()  # as the runner does
    seeds = args.seeds or ("1,10,100" if jax.default_backend() == "cpu" else "1,10,100,1000,4096")
    report: dict = {"machine": machine(devices=True), "train": [], "sweep": None, "sb3": None, "ratios": {}}
    for algo in ("MDPO-Robust-Lag", "PPO-Lag"):
        for n in (int(x) for x in seeds.split(",")):
            row = bench_train("cartpole", algo, n, args.repeats)
            report["train"].append(row)
            print(f"train {algo:16s} {n:5d} seeds: compile {row['compile_s']:5.1f}s run {row['wall_s']:7.2f}s "
                  f"policy steps/s {row['policy_steps_per_s']:12,.0f} all samples/s {row['all_samples_per_s']:12,.0f}",
                  flush=True)  # fmt: skip
    # baseline in the same run: JAX's default (rolled-loop) threefry lowering on the CPU
    if jax.default_backend() == "cpu":
        row = bench_train("cartpole", "MDPO-Robust-Lag", 10, args.repeats, rolled_threefry=True)
        report["train_rolled_threefry"] = row
        fast = [r for r in report["train"] if r["algorithm"] == "MDPO-Robust-Lag" and r["seeds"] == 10]
        if fast:  # the unrolled row exists unless --seeds left 10 out
            report["ratios"]["unrolled / rolled threefry, MDPO-Robust-Lag 10 seeds"] = (
                fast[0]["policy_steps_per_s"] / row["policy_steps_per_s"]
            )
        print(f"train MDPO-Robust-Lag    10 seeds, rolled threefry: compile {row['compile_s']:5.1f}s "
              f"run {row['wall_s']:7.2f}s policy steps/s {row['policy_steps_per_s']:12,.0f}", flush=True)  # fmt: skip
    # the same, sharded over one XLA CPU device per core (a fresh process: the split
    # must happen before JAX starts), as `run.py --devices auto` does
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        from rcmdp_jax.sharding import available_cores

        cores = available_cores()
        if cores > 1:
            rows, sweep_sharded = bench_sharded_cpu(cores, [n for n in (10, 100) if n % cores == 0], args.repeats)
            report["train_sharded_cpu"], report["sweep_sharded_cpu"] = rows, sweep_sharded
            for row in rows:
                print(f"train MDPO-Robust-Lag {row['seeds']:5d} seeds on {cores} CPU devices: compile "
                      f"{row['compile_s']:5.1f}s run {row['wall_s']:7.2f}s policy steps/s "
                      f"{row['policy_steps_per_s']:12,.0f}", flush=True)  # fmt: skip
    # the grid's MDPO family as the runner trains it: 6 algorithms x 10 seeds in one program
    mdpo = ["MDPO", "MDPO-Robust", "MDPO-Lag", "MDPO-Augmented-Lag", "MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag"]
    report["family"] = f = bench_family("cartpole", mdpo, 10, args.repeats)
    print(f"train MDPO family (6 algorithms) x 10 seeds: compile {f['compile_s']:5.1f}s run {f['wall_s']:7.2f}s "
          f"policy steps/s {f['policy_steps_per_s']:12,.0f}", flush=True)  # fmt: skip
    report["sweep"] = s = bench_sweep(repeats=args.repeats)
    print(f"sweep 10 seeds x 11 x 16 x 100 episodes: compile {s['compile_s']:.1f}s run {s['wall_s']:.2f}s "
          f"episode steps/s {s['episode_steps_per_s']:,.0f}", flush=True)  # fmt: skip
    if not args.skip_sb3:
        report["sb3"] = b = bench_sb3(args.repeats)
        if b is not None:
            print(f"SB3 PPO: train {b['train_steps_per_s']:,.0f} steps/s, eval {b['eval_steps_per_s']:,.0f} steps/s")
            for row in report["train"] + [f] + report.get("train_sharded_cpu", []):
                where = f" on {row['devices']} CPU devices" if row.get("devices", 1) > 1 else ""
                key = f"train {row['algorithm']} {row['seeds']} seeds{where} / SB3 PPO"
                report["ratios"][key] = row["policy_steps_per_s"] / b["train_steps_per_s"]
            report["ratios"]["sweep / SB3 predict loop"] = s["episode_steps_per_s"] / b["eval_steps_per_s"]
            if report.get("sweep_sharded_cpu"):
                ss = report["sweep_sharded_cpu"]
                report["ratios"][f"sweep on {ss['devices']} CPU devices / SB3 predict loop"] = (
                    ss["episode_steps_per_s"] / b["eval_steps_per_s"]
                )
            for k, v in report["ratios"].items():
                print(f"ratio {k}: {v:,.1f}x")
    if args.grid:
        report["grid"] = g = bench_grid()
        print(f"grid (14 algorithms x 10 seeds x 20,000 steps + sweep): {g['wall_s']:.1f}s wall "
              f"({g['families']} families: compile {g['compile_s_sum']:.1f}s, train {g['train_s_sum']:.1f}s summed)")  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
