"""LTMA's two gradient estimators side by side (not a test): MDPO-Robust-Lag trained
on every domain with the study's score function and with the pathwise gradient
(same seeds, same budget), then:

* the variance across episodes of one LTMA step's direction (the adversary uses one
  episode a step), for the trained policies at the nominal kernel;
* how far and how fast ``xi`` moves from the centre of the box during training;
* the robustness-test table of each.

    python experiments/ltma_estimators.py --seeds 10 --out ~/ltma_runs   # resumable
    -> docs/ltma_estimators.md, docs/ltma_estimators/*.png, docs/ltma_estimators.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from launch import command, launch  # experiments/launch.py

ROOT = Path(__file__).resolve().parent.parent
ESTIMATORS = ("score", "pathwise")
ALGO = "MDPO-Robust-Lag"


def train(out: Path, estimator: str, seeds: int) -> Path:
    run_dir = out / estimator
    done = all((run_dir / e / ALGO / "test_results.npz").exists() for e in ("cartpole", "inventory", "inventory3d"))
    if done:
        return run_dir
    args = ["--env", "all", "--algos", ALGO, "--seeds", str(seeds), "--set", f"ltma_estimator={estimator}"]
    print(" ".join(command(run_dir, args)), flush=True)
    launch(run_dir, args)
    return run_dir


def direction_spread(run_dir: Path, env_name: str, n: int = 512) -> dict:
    """Per estimator, one LTMA step's direction from each of ``n`` single episodes at the
    nominal kernel, for every trained seed of the score run: the mean direction (over
    all), and the spread: ``E||d - mean d||^2 / ||mean d||^2`` (relative variance)."""
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import checkpoint, envs, make_train
    from rcmdp_jax.config import config_from_dict
    from rcmdp_jax.ltma import ltma_direction, pathwise_direction
    from rcmdp_jax.rollout import Policy, sample_episode

    plan = json.loads((run_dir / "run.json").read_text())
    cfg = config_from_dict(plan["configs"][env_name][ALGO])
    keys = jax.random.split(jax.random.PRNGKey(plan["seed"]), plan["seeds"])
    result = checkpoint.restore(
        run_dir / env_name / ALGO / "checkpoint", checkpoint.abstract_result(make_train(cfg), keys)
    )
    env, params = envs.make(env_name)
    trainer = make_train(cfg)
    actor = trainer.step.actor
    lam = jnp.asarray(result.metrics["lam_tilde"][:, -1])  # each seed's last lam~
    gamma = cfg.hparams.gamma

    def per_seed(actor_params, lam_tilde, key):
        policy = Policy(actor, actor_params, dropout=cfg.act_dropout)
        ks, horizon = jax.random.split(key, n), cfg.option("ltma_horizon")

        def one(k):
            traj = jax.vmap(lambda kk: sample_episode(kk, env, params, policy, horizon))(k[None])
            score = ltma_direction(env, params, traj, lam_tilde, gamma)
            path, _ = pathwise_direction(env, params, policy, k[None], lam_tilde, gamma, horizon)
            return score, path

        return jax.vmap(one)(ks)

    score, path = jax.jit(jax.vmap(per_seed))(
        result.state.params["actor"], lam, jax.random.split(jax.random.PRNGKey(7), len(keys))
    )
    out = {}
    for name, d in (("score", np.asarray(score, np.float64)), ("pathwise", np.asarray(path, np.float64))):
        d = d.reshape(d.shape[0], d.shape[1], -1)  # [seeds, n, |xi|]
        mean = d.mean(1, keepdims=True)
        rel = ((d - mean) ** 2).sum(-1).mean(1) / np.maximum((mean[:, 0] ** 2).sum(-1), 1e-30)
        out[name] = {"relative_variance_median": float(np.median(rel)), "relative_variance_per_seed": rel.tolist(),
                     "mean_direction_seed0": mean[0, 0].tolist()}  # fmt: skip
    # do the two agree in direction? cosine of the mean directions, per seed
    ms, mp = np.asarray(score).reshape(len(keys), n, -1).mean(1), np.asarray(path).reshape(len(keys), n, -1).mean(1)
    cos = (ms * mp).sum(-1) / np.maximum(np.linalg.norm(ms, axis=-1) * np.linalg.norm(mp, axis=-1), 1e-30)
    out["cosine_of_mean_directions"] = cos.tolist()
    return out


def movement(run_dir: Path, env_name: str) -> np.ndarray:
    """``|xi_t - xi_c| / kappa`` averaged over the entries of ``xi``: ``[seeds, iterations]``."""
    from rcmdp_jax import envs

    _, params = envs.make(env_name)
    xi = np.load(run_dir / env_name / ALGO / "train_metrics.npz")["xi"]  # [S, T, *xi]
    rel = np.abs(xi - np.asarray(params.xi_c)) / np.asarray(params.kappa)
    return rel.reshape(rel.shape[0], rel.shape[1], -1).mean(-1)


def table_row(run_dir: Path, env_name: str) -> str:
    md = (run_dir / env_name / "summary.md").read_text().splitlines()
    return next(line for line in md if line.startswith(f"| {ALGO} "))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--out", default="ltma_runs", help="run folders (outside the work tree; resumable)")
    p.add_argument("--docs", default=str(ROOT / "docs"))
    args = p.parse_args(argv)
    out, docs = Path(args.out).expanduser(), Path(args.docs)
    t0 = time.perf_counter()
    runs = {e: train(out, e, args.seeds) for e in ESTIMATORS}
    train_s = time.perf_counter() - t0

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = docs / "ltma_estimators"
    fig_dir.mkdir(parents=True, exist_ok=True)
    from robustness import code_version  # experiments/robustness.py: the commit, "+uncommitted" if edited

    version = code_version()
    report = {"seeds": args.seeds, "algorithm": ALGO, "train_and_test_s": train_s, "code_version": version,
              "domains": {}}  # fmt: skip
    lines = [
        "# LTMA: the score function (the study's) vs the pathwise gradient",
        "",
        f"{ALGO}, the study's short budgets, {args.seeds} seeds, the same seeds for both; "
        f"`python experiments/ltma_estimators.py` at code version `{version}` (the machine: see "
        "docs/performance.md). "
        "`--set ltma_estimator=pathwise` trains with the pathwise adversary. What the numbers say: "
        "[ltma_estimators_findings.md](ltma_estimators_findings.md).",
        "",
    ]
    for env_name in ("cartpole", "inventory", "inventory3d"):
        spread = direction_spread(runs["score"], env_name)
        moved = {e: movement(runs[e], env_name) for e in ESTIMATORS}
        rows = {e: table_row(runs[e], env_name) for e in ESTIMATORS}
        report["domains"][env_name] = {
            "direction_spread": spread,
            "xi_moved_final": {e: float(moved[e][:, -1].mean()) for e in ESTIMATORS},
            "xi_moved_half": {e: float(moved[e][:, moved[e].shape[1] // 2].mean()) for e in ESTIMATORS},
            "table_rows": rows,
        }
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for e in ESTIMATORS:
            m = moved[e]
            ax.plot(np.arange(m.shape[1]), m.mean(0), label=e)
            ax.fill_between(np.arange(m.shape[1]), m.min(0), m.max(0), alpha=0.2)
        ax.set_xlabel("iteration")
        ax.set_ylabel("mean |xi - xi_c| / kappa")
        ax.set_title(f"{env_name}: how far the adversary moved xi ({ALGO})")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(fig_dir / f"{env_name}_xi.png", dpi=110)
        plt.close(fig)
        lines += [
            f"## {env_name}",
            "",
            "| estimator | relative variance of one step's direction (median over seeds) | "
            "xi moved, half-way (fraction of kappa) | xi moved, end |",
            "|---|---|---|---|",
        ]
        for e in ESTIMATORS:
            d = report["domains"][env_name]
            lines.append(f"| {e} | {spread[e]['relative_variance_median']:.3g} | {d['xi_moved_half'][e]:.3f} | "
                         f"{d['xi_moved_final'][e]:.3f} |")  # fmt: skip
        cos = np.asarray(spread["cosine_of_mean_directions"])
        lines += [
            "",
            f"Cosine between the two estimators' mean directions (512 episodes, per seed): median {np.median(cos):.3f}, "
            f"min {cos.min():.3f}.",
            "",
            f"![xi movement](ltma_estimators/{env_name}_xi.png)",
            "",
            "Robustness test (mean ± SE over kernels (min)):",
            "",
            "| Algorithm | Return | R_pen± | R_pen |",
            "|---|---|---|---|",
        ]
        for e in ESTIMATORS:
            lines.append(rows[e].replace(f"| {ALGO} ", f"| {ALGO} ({e}) ").replace("**", ""))
        lines.append("")
    (docs / "ltma_estimators.json").write_text(json.dumps(report, indent=2))
    (docs / "ltma_estimators.md").write_text("\n".join(lines))
    print(f"wrote {docs / 'ltma_estimators.md'} ({train_s:.0f} s of training and testing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
