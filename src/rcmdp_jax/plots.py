"""The run's plots: test return and constraint values against the distortion level,
and the training curves."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from rcmdp_jax import stats


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["axes.prop_cycle"] = plt.cycler(color=plt.get_cmap("tab20").colors)
    return plt


def plot_robustness(out_dir: Path, results: dict, levels: np.ndarray, env_name: str) -> list[Path]:
    """Test Return and each constraint value vs distortion level, SE bands across directions."""
    plt = _pyplot()

    m = next(iter(results.values()))[1].shape[-1]
    panels = [("Return", lambda V, C: V)] + [
        (f"constraint value C_{j + 1}", (lambda j: lambda V, C: C[..., j])(j)) for j in range(m)
    ]
    paths = []
    for i, (label, fn) in enumerate(panels):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo, (V, C) in results.items():
            mean, se = stats.per_level(fn(V, C))
            ax.plot(levels, mean, marker="o", ms=3, label=algo)
            ax.fill_between(levels, mean - se, mean + se, alpha=0.2)
        ax.set_xlabel("distortion level")
        ax.set_ylabel(label)
        ax.set_title(f"{env_name}: test {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        fig.tight_layout()
        path = out_dir / ("test_return.png" if i == 0 else f"test_cost_{i}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_training(out_dir: Path, metrics: dict, xi_c: np.ndarray, kappa: np.ndarray, env_name: str) -> Path:
    """Training curves (mean over seeds): evaluation return, constraint value, lam and xi distortion."""
    plt = _pyplot()

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for algo, m in metrics.items():
        steps = np.asarray(m["policy_steps"]).mean(0)
        with warnings.catch_warnings():  # iterations without an evaluation are NaN for every seed
            warnings.simplefilter("ignore", RuntimeWarning)
            ret = np.nanmean(np.asarray(m["eval_return"]), axis=0)
            cost = np.nanmean(np.asarray(m["eval_costs"])[..., 0], axis=0)
        lam = np.asarray(m["lam"])[..., 0].mean(0)
        xi = np.asarray(m["xi"])
        dist = np.abs(xi - xi_c) / np.maximum(kappa, 1e-12)
        dist = dist.reshape(dist.shape[:2] + (-1,)).max(-1).mean(0)
        ok = np.isfinite(ret)
        axes[0, 0].plot(steps[ok], ret[ok], label=algo)
        axes[0, 1].plot(steps[ok], cost[ok], label=algo)
        axes[1, 0].plot(steps, lam, label=algo)
        axes[1, 1].plot(steps, dist, label=algo)
    titles = ["evaluation return", "evaluation constraint value C_1", "lambda_1", "max_i |xi_i - xi_c,i| / kappa_i"]
    for ax, t in zip(axes.ravel(), titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("policy steps")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{env_name}: training curves (mean over seeds)")
    fig.tight_layout()
    path = out_dir / "train_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
