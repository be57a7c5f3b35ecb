"""The report's figures: test return and each constraint's value against the distortion level, the
training curves and rliable's figures; a colour per learner, a line style and marker per variant."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from rcmdp_jax import stats
from rcmdp_jax.figures import pyplot, save
from rcmdp_jax.presets import parse_algorithm, split_variant

LEARNER_COLOURS = {"mcpmd": "tab:green", "ppo": "tab:blue", "mdpo": "tab:red"}
EXTRA_COLOURS = ("tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink", "tab:gray", "tab:orange")
# (robust, constraint) -> (line style, marker)
VARIANT_STYLES = {
    (False, "none"): ("-", "o"),
    (True, "none"): ("--", "s"),
    (False, "lagrangian"): (":", "^"),
    (False, "augmented"): ((0, (3, 1, 1, 1, 1, 1)), "D"),
    (True, "lagrangian"): ("-.", "v"),
    (True, "augmented"): ((0, (6, 2)), "P"),
}
# the report's figure files (constraint j's: TEST_COST.format(j), j = 1, 2, ...), removed by ``drop_stale``
TEST_RETURN, TRAIN_CURVES, INTERVALS, PROFILES = "test_return.png", "train_curves.png", "intervals.png", "profiles.png"
TEST_COST = "test_cost_{}.png"
WORST_CAPTION = ("solid: each level's worst test kernel (the highest mean C over seeds and episodes); faint: the "
                 "mean over the level's kernels.\nThe worst kernels as their fields: summary.md, \"Is the constraint "
                 "kept?\"")  # fmt: skip


def parsed(algo: str) -> tuple[str, str, bool] | None:
    """``(learner, constraint, robust)`` of an algorithm name (variants too), or None."""
    try:
        return parse_algorithm(split_variant(algo)[0])
    except ValueError:
        return None


def styles(algos) -> dict[str, dict]:
    """Matplotlib keywords per algorithm: its learner's colour, its variant's line and marker (twins: new colours)."""
    out, used, extra = {}, set(), iter(EXTRA_COLOURS * 4)
    for algo in algos:
        learner, constraint, robust = parsed(algo) or ("?", "none", False)
        colour = LEARNER_COLOURS.get(learner, "black")
        # a rule without a style of its own (pid, a plug-in's) is drawn as the Lagrangian
        line, marker = VARIANT_STYLES.get((robust, constraint), VARIANT_STYLES[(robust, "lagrangian")])
        if (colour, str(line)) in used:
            colour = next(extra)
        used.add((colour, str(line)))
        out[algo] = dict(color=colour, linestyle=line, marker=marker)
    return out


def plot_robustness(out_dir: Path, results: dict, levels, env_name: str, cost_names, worst_kernels=None) -> None:
    """Test Return against the distortion level (SE bands across directions), and each constraint's value on
    each level's worst kernel (faint: the level's mean); ``worst_kernels``: ``{j: {algo: kernel in words}}``."""
    plt, look = pyplot(), styles(results)
    fig, ax = plt.subplots(figsize=(6, 4))
    for algo, (V, _) in results.items():
        mean, se = stats.per_level(V)
        ax.plot(levels, mean, ms=3, label=algo, **look[algo])
        ax.fill_between(levels, mean - se, mean + se, alpha=0.12, color=look[algo]["color"])
    ax.legend(fontsize=6, ncol=2)
    ax.set(xlabel="distortion level", ylabel="Return")
    ax.set_title(f"{env_name}: test Return", fontsize=10)
    ax.grid(alpha=0.3)
    save(fig, out_dir / TEST_RETURN)
    for j, name in enumerate(cost_names):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo, (_, C) in results.items():
            scores = stats.environment_scores(C[..., j])  # (level, direction)
            ax.plot(levels, scores.max(1), ms=3, label=algo, **look[algo])
            ax.plot(levels, scores.mean(1), lw=0.8, alpha=0.35, color=look[algo]["color"],
                    linestyle=look[algo]["linestyle"])  # fmt: skip
        ax.legend(fontsize=6, ncol=2)
        ax.axhline(0.0, color="black", lw=0.8)  # the limit: kept below it
        kernels = (worst_kernels or {}).get(j, {})
        named = "\nworst kernel: " + "; ".join(f"{a}: {k}" for a, k in kernels.items()) if kernels else ""
        if len(kernels) > 3:
            named = f"; {len(kernels)} algorithms' worst kernels there"
        caption = fig.text(0.01, 0.01, WORST_CAPTION + named, fontsize=6, va="bottom")
        ax.set(xlabel="distortion level", ylabel=f"constraint value {name} (kept when <= 0)")
        ax.set_title(f"{env_name}: test constraint value {name} on each level's worst kernel", fontsize=10)
        ax.grid(alpha=0.3)
        save(fig, out_dir / TEST_COST.format(j + 1), caption)


def drop_stale(out_dir: Path, n_costs: int) -> list[str]:
    """Remove (and name) an earlier report's figures in ``out_dir``: ``--plots off`` leaves none of other results."""
    names = [TEST_RETURN, TRAIN_CURVES, INTERVALS, PROFILES] + [TEST_COST.format(j) for j in range(1, n_costs + 1)]
    stale = sorted(out_dir / n for n in names if (out_dir / n).is_file())
    for path in stale:
        path.unlink()
    return [p.name for p in stale]


def plot_training(out_dir: Path, metrics: dict, xi_c, kappa, env_name: str, cost_names=None):
    """``train_curves.png`` (mean over seeds; the figure): evaluation return, the first constraint's value,
    its multiplier lambda (constrained algorithms only) and the kernel's distortion, against policy steps."""
    cost, look = (cost_names or ["C_1"])[0], styles(metrics)
    fig, axes = pyplot().subplots(2, 2, figsize=(10, 7))
    for algo, m in metrics.items():
        steps = np.asarray(m["policy_steps"]).mean(0)
        with warnings.catch_warnings():  # iterations without an evaluation are NaN for every seed
            warnings.simplefilter("ignore", RuntimeWarning)
            ret = np.nanmean(np.asarray(m["eval_return"]), axis=0)
            value = np.nanmean(np.asarray(m["eval_costs"])[..., 0], axis=0)
        dist = np.abs(np.asarray(m["xi"]) - xi_c) / np.maximum(kappa, 1e-12)
        dist = dist.reshape(dist.shape[:2] + (-1,)).max(-1).mean(0)
        ok = np.isfinite(ret)
        kw = dict(look[algo], markevery=max(1, len(steps) // 8), ms=3, label=algo)
        axes[0, 0].plot(steps[ok], ret[ok], **kw)
        axes[0, 1].plot(steps[ok], value[ok], **kw)
        if (parsed(algo) or ("", "none"))[1] != "none":  # an unconstrained learner's lambda it never reads
            axes[1, 0].plot(steps, np.asarray(m["lam"])[..., 0].mean(0), **kw)
        axes[1, 1].plot(steps, dist, **kw)
    titles = ["evaluation return", f"evaluation constraint value {cost} (kept when <= 0)",
              f"lambda of {cost} (constrained algorithms)", "max_i |xi_i - xi_c,i| / kappa_i"]  # fmt: skip
    for ax, t in zip(axes.ravel(), titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("policy steps")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{env_name}: training curves (mean over seeds)")
    save(fig, out_dir / TRAIN_CURVES)
    return fig


def plot_aggregate(out_dir, figures: dict, env_name: str) -> None:
    """rliable's figures from ``report.aggregate_section``'s JSON: ``intervals.png`` (IQMs) and ``profiles.png``."""
    plt, metrics, algos = pyplot(), list(figures), list(next(iter(figures.values()))["iqm"])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 0.35 * len(algos) + 1.5), squeeze=False)
    y = np.arange(len(algos))[::-1]
    for ax, metric in zip(axes[0], metrics):
        for yi, a in zip(y, algos):
            point, low, high = figures[metric]["iqm"][a]
            ax.plot([low, high], [yi, yi], lw=6, alpha=0.5, solid_capstyle="butt")
            ax.plot([point], [yi], "k|", ms=12)
        ax.set_yticks(y, algos if ax is axes[0][0] else [])
        ax.set_xlabel(f"IQM of {metric}")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{env_name}: IQM with 95% stratified-bootstrap intervals")
    save(fig, out_dir / INTERVALS)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for a, p in figures[metric]["profiles"].items():
            ax.plot(figures[metric]["profile_taus"], p, label=a)
        ax.set(xlabel=f"{metric} threshold tau", ylabel="fraction of (seed, kernel) scores > tau")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6)
    fig.suptitle(f"{env_name}: performance profiles over the test kernels")
    save(fig, out_dir / PROFILES)
