"""Do the constrained learners keep their constraint at the nominal kernel on every
gymnax preset, and under which reading of the dual phase's ``C^``?

    python experiments/nominal_constraint.py --out DIR [--parallel 1] [--devices 2]

Trains PPO-Lag and MDPO-Lag (10 seeds, short budget) on each gymnax preset under each
``dual_estimator``, with ``experiments/run.py`` (``--parallel`` runs at a time, each on
``--devices`` CPU devices; resumable, ``experiments/launch.py``), and writes ``DIR/nominal_constraint.json``: per preset,
reading and learner, each seed's constraint value at the nominal kernel (the
robustness test's level 0, deterministic policy) and its discounted return there.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from job_pool import run_pool  # experiments/job_pool.py
from launch import command as launch_command  # experiments/launch.py

PRESETS = ("gymnax:CartPole-v1", "gymnax:Pendulum-v1", "gymnax:Acrobot-v1", "gymnax:MountainCarContinuous-v0")
READINGS = ("cost_to_go", "start_value", "step_cost", "gae")
LEARNERS = ("PPO-Lag", "MDPO-Lag")


def command(env: str, reading: str, out: Path, seeds: int, devices: int) -> list[str]:
    """The runner's command for one run (``--resume`` when its folder holds run.json)."""
    return launch_command(out, ["--env", env, "--algos", ",".join(LEARNERS), "--seeds", str(seeds), "--set",
                                f"dual_estimator={reading}", "--n-test", "10", "--devices", str(devices)])  # fmt: skip


def tested(run_dir: Path, env: str) -> bool:
    """Whether every learner of the run has its robustness test's results."""
    from rcmdp_jax.study.run_folder import RunFolder

    return all((RunFolder(run_dir).algo_dir(env, a) / "test_results.npz").exists() for a in LEARNERS)


def nominal(run_dir: Path, env: str) -> dict:
    from rcmdp_jax.study.run_folder import RunFolder, kept_seeds, load_npz

    folder, out = RunFolder(run_dir), {}
    for algo in LEARNERS:
        z = load_npz(folder.algo_dir(env, algo) / "test_results.npz")
        keep = kept_seeds(z)
        out[algo] = {"C": z["C"][keep][:, 0, 0].mean(-2).max(-1).tolist(), "V": z["V"][keep][:, 0, 0].mean(-1).tolist()}
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--devices", type=int, default=2)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    jobs = []
    for env in PRESETS:
        for r in READINGS:
            run_dir = out / f"{env.replace(':', '-')}_{r}"
            if not tested(run_dir, env):
                jobs.append((run_dir.name, command(env, r, run_dir, args.seeds, args.devices)))
    run_pool(jobs, args.parallel, lambda s: print(s, flush=True), lambda name, seconds: None, logs=out)
    table = {env: {r: nominal(out / f"{env.replace(':', '-')}_{r}", env) for r in READINGS} for env in PRESETS}
    (out / "nominal_constraint.json").write_text(json.dumps({"wall_s": time.time() - t0, "table": table}, indent=1))
    for env in PRESETS:
        for r in READINGS:
            cells = [f"{a} C {np.mean(table[env][r][a]['C']):+.2f} ({int(np.sum(np.array(table[env][r][a]['C']) > 0))}"
                     f"/{len(table[env][r][a]['C'])} broken)" for a in LEARNERS]  # fmt: skip
            print(f"{env:34s} {r:12s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
