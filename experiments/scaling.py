"""How the cost grows: training throughput and peak host memory against the number of
seeds (1 .. 1,000) and the budget, on one and on all CPU devices; the robustness sweep
against episodes per kernel; Stable-Baselines3 PPO and this CPU's matmul speed measured
in the same run as references. Writes ``docs/scaling.json`` and ``docs/scaling.png``.

    python experiments/scaling.py                 # the curves (< 15 min on a 2-core CPU)
    python experiments/scaling.py --grid-only     # 1,000 seeds of the whole CartPole grid (peak memory)

Every point runs in its own process (``--point``), so its peak memory is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MDPO_3D = ["MDPO", "MDPO-Robust", "MDPO-Lag", "MDPO-Augmented-Lag", "MDPO-Robust-Lag", "MDPO-Robust-Augmented-Lag"]
TWO_ITERATIONS = 3200  # policy steps: two iterations of 4 x 400 (the first includes the first execution)


def points() -> list[dict]:
    """Every measurement, in the order it runs."""
    out = []
    for devices in ("1", "all"):
        for seeds in (1, 10, 100, 1000):
            out.append(dict(kind="train", env="cartpole", algos=["MDPO-Robust-Lag"], seeds=seeds, devices=devices,
                            steps=TWO_ITERATIONS))  # fmt: skip
        # 1,000 seeds on all cores only: the one-device point would take the script past 15 min
        for seeds in (1, 10, 100) if devices == "1" else (1, 10, 100, 1000):
            out.append(dict(kind="train", env="cartpole", algos=["PPO-Lag"], seeds=seeds, devices=devices,
                            steps=TWO_ITERATIONS))  # fmt: skip
    for seeds in (1, 10, 100):
        out.append(
            dict(kind="train", env="inventory3d", algos=MDPO_3D, seeds=seeds, devices="all", steps=TWO_ITERATIONS)
        )
    for steps in (20_000, 200_000):  # the budget at 10 seeds
        out.append(dict(kind="train", env="cartpole", algos=["MDPO-Robust-Lag"], seeds=10, devices="all", steps=steps))
    out.append(dict(kind="train", env="cartpole", algos=["PPO-Lag"], seeds=10, devices="all", steps=20_000))
    for n_test in (10, 100, 400):
        out.append(dict(kind="sweep", env="cartpole", seeds=10, n_test=n_test, devices="all"))
    return out + [dict(kind="matmul"), dict(kind="sb3")]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_point(p: dict, mesh) -> dict:
    import jax
    import numpy as np

    from rcmdp_jax import preset
    from rcmdp_jax.chunked import Prepared, train_prepared

    cfgs = [preset(p["env"], a, total_timesteps=p["steps"]) for a in p["algos"]]
    keys = np.asarray(jax.random.split(jax.random.PRNGKey(0), p["seeds"]))
    prep = Prepared(cfgs, keys, True, mesh)
    per_member, train_s = train_prepared(prep, f"[{p['env']} {p['seeds']} seeds]")
    policy = sum(float(np.asarray(r.metrics["policy_steps"])[:, -1].sum()) for r in per_member)
    samples = sum(float(np.asarray(r.metrics[k])[:, -1].sum()) for r in per_member
                  for k in ("policy_steps", "dual_steps", "ltma_steps"))  # fmt: skip
    return dict(compile_s=prep.compile_s, train_s=train_s, policy_steps=policy, samples=samples,
                policy_steps_per_s=policy / train_s, samples_per_s=samples / train_s)  # fmt: skip


def sweep_point(p: dict, mesh) -> dict:
    import jax
    import numpy as np

    from rcmdp_jax import make_train, preset
    from rcmdp_jax.evaluate import make_eval
    from rcmdp_jax.sharding import sharded_blocks

    cfg = preset(p["env"], "MDPO-Robust-Lag")
    params = jax.vmap(make_train(cfg).init)(jax.random.split(jax.random.PRNGKey(0), p["seeds"])).params["actor"]
    sweep = make_eval(cfg, p["n_test"])
    fn = sharded_blocks(sweep.from_keys, mesh) if mesh is not None else jax.jit(sweep.from_keys)
    keys = jax.random.split(jax.random.PRNGKey(1), p["seeds"])
    t0 = time.perf_counter()
    jax.block_until_ready(fn(params, keys))  # compile + first run
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = jax.block_until_ready(fn(params, keys))
    wall = time.perf_counter() - t0
    episodes = int(np.asarray(res["V"]).size)
    steps = episodes * sweep.env.episode_length  # an upper bound: episodes that end early take fewer steps
    return dict(first_call_s=first, wall_s=wall, episodes=episodes, episodes_per_s=episodes / wall,
                episode_steps_per_s_bound=steps / wall)  # fmt: skip


def matmul_point(mesh) -> dict:
    """This CPU's float32 matmul speed (all devices: one matmul per device at once): the
    arithmetic limit the training's small matmuls are measured against."""
    import jax
    import jax.numpy as jnp

    n = 2048
    d = 1 if mesh is None else mesh.size
    x = jnp.ones((d, n, n), jnp.float32)
    from rcmdp_jax.sharding import AXIS

    spec = jax.sharding.PartitionSpec(AXIS)
    square = jax.vmap(lambda a: a @ a)
    f = jax.jit(square if mesh is None else jax.shard_map(square, mesh=mesh, in_specs=spec, out_specs=spec))
    jax.block_until_ready(f(x))
    t0, reps = time.perf_counter(), 5
    for _ in range(reps):
        jax.block_until_ready(f(x))
    wall = (time.perf_counter() - t0) / reps
    return dict(gflops=2 * n**3 * d / wall / 1e9, devices=d)


def run_point(p: dict) -> dict:
    from rcmdp_jax import sharding

    if p.get("devices", "all") == "all":
        sharding.split_cpu(sharding.available_cores())
    if p["kind"] == "sb3":
        sys.path.insert(0, str(HERE))
        from bench import bench_sb3

        return bench_sb3(repeats=1) or {}
    from rcmdp_jax import cpu_prng

    cpu_prng.apply_default()
    mesh = sharding.setup_devices(p.get("devices", "all")) if p.get("devices", "all") == "all" else None
    if mesh is not None and mesh.size == 1:
        mesh = None
    fn = {"train": train_point, "sweep": sweep_point}.get(p["kind"])
    return fn(p, mesh) if fn else matmul_point(mesh)


def measure(p: dict) -> dict:
    cmd = [sys.executable, str(HERE / "scaling.py"), "--point", json.dumps(p)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    out = {**p, "process_wall_s": time.perf_counter() - t0}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode or not lines:
        return {**out, "error": (proc.stderr or proc.stdout)[-500:]}
    return {**out, **json.loads(lines[-1])}


def grid(seeds: int) -> dict:
    """The whole CartPole grid (14 algorithms, the runner's families) at ``seeds`` seeds,
    one iteration each and 2 test episodes per kernel: peak memory and wall time."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        argv = [
            "--seeds",
            str(seeds),
            "--steps",
            "1600",
            "--n-test",
            "2",
            "--out",
            f"{tmp}/run",
            "--compile-cache",
            "off",
        ]
        result = Path(tmp) / "result.json"
        code = ("import json,resource,sys; from rcmdp_jax import sharding; sharding.split_cpu(sharding.available_cores());"
                "from rcmdp_jax.study.cli import main; rc = main(sys.argv[2:]); open(sys.argv[1], 'w').write("
                "json.dumps({'rc': rc, 'peak_rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))")  # fmt: skip
        t0 = time.perf_counter()  # the runner's progress goes to this process's output as it comes
        proc = subprocess.run([sys.executable, "-c", code, str(result), *argv], cwd=ROOT)
        wall = time.perf_counter() - t0
        done = json.loads(result.read_text()) if result.exists() else {"error": f"exited {proc.returncode}"}
    return {"seeds": seeds, "wall_s": wall, **done}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in report["points"] if r["kind"] == "train" and r["steps"] == TWO_ITERATIONS and "error" not in r]
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    for (env, algos, dev), rows in _series(train).items():
        label = f"{env} {algos} ({'1 device' if dev == '1' else 'all cores'})"
        xs = [r["seeds"] for r in rows]
        ax[0].plot(xs, [r["policy_steps_per_s"] for r in rows], marker="o", label=label)
        ax[1].plot(xs, [r["peak_rss_mib"] for r in rows], marker="o", label=label)
    sb3 = next((r for r in report["points"] if r["kind"] == "sb3" and "train_steps_per_s" in r), None)
    if sb3:
        ax[0].axhline(sb3["train_steps_per_s"], color="k", ls="--", label="SB3 PPO, 1 seed")
    for a, title, ylab in ((ax[0], "training throughput", "policy steps / s"), (ax[1], "peak host memory", "MiB")):
        a.set(xscale="log", yscale="log", xlabel="seeds", ylabel=ylab, title=title)
        a.grid(alpha=0.3, which="both")
    ax[0].legend(fontsize=7)
    sweep = [r for r in report["points"] if r["kind"] == "sweep" and "error" not in r]
    ax[2].plot([r["n_test"] for r in sweep], [r["episodes_per_s"] for r in sweep], marker="o", label="episodes / s")
    ax[2].set(xscale="log", yscale="log", xlabel="episodes per kernel (10 seeds x 176 kernels)", ylabel="episodes / s",
              title="robustness sweep (CartPole, all cores)")  # fmt: skip
    ax[2].grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _series(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        name = "MDPO family" if len(r["algos"]) > 1 else r["algos"][0]
        out.setdefault((r["env"], name, r["devices"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["seeds"]) for k, v in out.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--point", help=argparse.SUPPRESS)
    p.add_argument("--grid-only", action="store_true", help="only the 1,000-seed CartPole grid (peak memory)")
    p.add_argument("--grid-seeds", type=int, default=1000)
    p.add_argument("--docs", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    if args.point:  # a child process: one measurement, printed as JSON
        result = run_point(json.loads(args.point))
        print(json.dumps({**result, "peak_rss_mib": peak_rss_mib()}))
        return 0
    docs = Path(args.docs)
    path = docs / "scaling.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    if args.grid_only:
        report["grid"] = grid(args.grid_seeds)
        print(json.dumps(report["grid"]))
    else:
        import platform

        sys.path.insert(0, str(HERE))
        from launch import machine

        report.update(machine=machine(devices=True), python=platform.python_version(), points=[])
        t0 = time.perf_counter()
        for i, pt in enumerate(points()):
            r = measure(pt)
            report["points"].append(r)
            shown = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items() if k != "algos"}
            print(f"[{i + 1}/{len(points())}] {shown}", flush=True)
        report["wall_s"] = time.perf_counter() - t0
        plot(report, docs / "scaling.png")
    path.write_text(json.dumps(report, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
