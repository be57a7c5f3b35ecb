"""The run's plots: test return and constraint values against the distortion level,
and the training curves. One colour per learner and one line style (and marker) per
variant, so the 14 algorithms are told apart; costs by name; the multiplier panel
shows the constrained algorithms only."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from rcmdp_jax import stats
from rcmdp_jax.figures import fit, pyplot, save

LEARNER_COLOURS = {"mcpmd": "tab:green", "ppo": "tab:blue", "mdpo": "tab:red"}
# (robust, constraint) -> (line style, marker)
VARIANT_STYLES = {
    (False, "none"): ("-", "o"),
    (True, "none"): ("--", "s"),
    (False, "lagrangian"): (":", "^"),
    (False, "augmented"): ((0, (3, 1, 1, 1, 1, 1)), "D"),
    (True, "lagrangian"): ("-.", "v"),
    (True, "augmented"): ((0, (6, 2)), "P"),
}
# the report's figure files (``plot_aggregate`` draws the last two), one name each: drawn here and there,
# removed by ``drop_stale``
TEST_RETURN, TRAIN_CURVES, INTERVALS, PROFILES = "test_return.png", "train_curves.png", "intervals.png", "profiles.png"


def test_cost_figure(j: int) -> str:
    """The file of constraint ``j``'s figure (``j`` = 1, 2, ...)."""
    return f"test_cost_{j}.png"


EXTRA_COLOURS = ("tab:purple", "tab:brown", "tab:olive", "tab:cyan", "tab:pink", "tab:gray", "tab:orange")


def parsed(algo: str) -> tuple[str, str, bool] | None:
    """``(learner, constraint, robust)`` of an algorithm name (variants too), or None."""
    from rcmdp_jax.presets import parse_algorithm, split_variant

    try:
        return parse_algorithm(split_variant(algo)[0])
    except ValueError:
        return None


def styles(algos) -> dict[str, dict]:
    """Matplotlib keywords per algorithm: the learner's colour, the variant's line style
    and marker; names sharing both (schedule or hyperparameter variants) get other
    colours in turn."""
    out, used, extra = {}, set(), iter(EXTRA_COLOURS * 4)
    for algo in algos:
        p = parsed(algo)
        learner, constraint, robust = p if p else ("?", "none", False)
        colour = LEARNER_COLOURS.get(learner, "black")
        # a rule without a style of its own (pid, a plug-in's) is drawn as the Lagrangian
        line, marker = VARIANT_STYLES.get((robust, constraint), VARIANT_STYLES[(robust, "lagrangian")])
        key = (colour, str(line))
        if key in used:
            colour = next(extra)
            key = (colour, str(line))
        used.add(key)
        out[algo] = dict(color=colour, linestyle=line, marker=marker)
    return out


def constrained(algo: str) -> bool:
    p = parsed(algo)
    return p is not None and p[1] != "none"


WORST_CAPTION = ("solid: each level's worst test kernel (the highest mean C over seeds and episodes); faint: the "
                 "mean over the level's kernels.\nThe worst kernels as their fields: summary.md, \"Is the constraint "
                 "kept?\"")  # fmt: skip


def plot_robustness(out_dir: Path, results: dict, levels: np.ndarray, env_name: str, cost_names=None,
                    worst_kernels=None) -> list[Path]:  # fmt: skip
    """Test Return vs distortion level (mean over each level's kernels, SE bands across
    directions), and each constraint value on each level's worst kernel (the mean over the
    level's kernels as a faint second line): where the constraint breaks, as the summary's
    "Is the constraint kept?" table says, not averaged away. ``worst_kernels``: per
    constraint ``j``, ``{algo: its worst kernel in words}``, named in the caption."""
    plt = pyplot()

    m = next(iter(results.values()))[1].shape[-1]
    names = list(cost_names) if cost_names and len(cost_names) == m else [f"C_{j + 1}" for j in range(m)]
    panels = [("Return", lambda V, C: V)] + [
        (f"constraint value {names[j]}", (lambda j: lambda V, C: C[..., j])(j)) for j in range(m)
    ]
    look = styles(results)
    paths = []
    for i, (label, fn) in enumerate(panels):
        fig, ax = plt.subplots(figsize=(6, 4))
        for algo, (V, C) in results.items():
            if i == 0:
                mean, se = stats.per_level(fn(V, C))
                ax.plot(levels, mean, ms=3, label=algo, **look[algo])
                ax.fill_between(levels, mean - se, mean + se, alpha=0.12, color=look[algo]["color"])
                continue
            worst, mean = worst_per_level(fn(V, C))
            ax.plot(levels, worst, ms=3, label=algo, **look[algo])
            ax.plot(levels, mean, lw=0.8, alpha=0.35, color=look[algo]["color"], linestyle=look[algo]["linestyle"])
        caption = None
        if i > 0:
            ax.axhline(0.0, color="black", lw=0.8)  # the limit: kept below it
            caption = fig.text(0.01, 0.01, WORST_CAPTION + _named((worst_kernels or {}).get(i - 1, {})), fontsize=6,
                               va="bottom")  # fmt: skip
        ax.set_xlabel("distortion level")
        ax.set_ylabel(label + (" (kept when <= 0)" if i > 0 else ""))
        ax.set_title(f"{env_name}: test {label}" + (" on each level's worst kernel" if i > 0 else ""), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        path = out_dir / (TEST_RETURN if i == 0 else test_cost_figure(i))
        save(fig, path, caption)
        paths.append(path)
    return paths


def drop_stale(out_dir: Path, n_costs: int | None) -> list[str]:
    """Remove the figures an earlier report drew in ``out_dir`` (a report without figures,
    ``--plots off``, must not leave figures of other results beside its tables): the files of
    the names the report writes, ``test_cost_1.png`` .. ``test_cost_<n_costs>.png`` among them
    (None: as many as follow on from 1); their names."""
    out_dir = Path(out_dir)
    if n_costs is None:
        n_costs = 0
        while (out_dir / test_cost_figure(n_costs + 1)).exists():
            n_costs += 1
    names = [TEST_RETURN, TRAIN_CURVES, INTERVALS, PROFILES] + [test_cost_figure(j) for j in range(1, n_costs + 1)]
    stale = sorted(out_dir / n for n in names if (out_dir / n).is_file())
    for path in stale:
        path.unlink()
    return [p.name for p in stale]


def _named(kernels: dict, most: int = 3) -> str:
    """The caption's line of each algorithm's worst kernel (up to ``most`` algorithms)."""
    if not kernels:
        return ""
    if len(kernels) > most:
        return f"; {len(kernels)} algorithms' worst kernels there"
    return "\nworst kernel: " + "; ".join(f"{a}: {k}" for a, k in kernels.items())


def worst_per_level(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(seed, level, direction, episode)`` -> per level, the worst (highest) kernel's mean
    over seeds and episodes and the mean over the level's kernels: two arrays ``(level,)``."""
    scores = stats.environment_scores(x)
    return scores.max(axis=1), scores.mean(axis=1)


def plot_training(out_dir: Path, metrics: dict, xi_c: np.ndarray, kappa: np.ndarray, env_name: str,
                  cost_names=None) -> Path:  # fmt: skip
    """Training curves (mean over seeds), saved as ``train_curves.png``: ``training_figure``."""
    plt = pyplot()
    fig = training_figure(metrics, xi_c, kappa, env_name, cost_names)
    path = out_dir / TRAIN_CURVES
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def training_figure(metrics: dict, xi_c: np.ndarray, kappa: np.ndarray, env_name: str, cost_names=None):
    """Evaluation return, the first constraint's value, its multiplier lambda (constrained
    algorithms only) and the kernel's distortion, against policy steps."""
    plt = pyplot()

    cost = (cost_names or ["C_1"])[0]
    look = styles(metrics)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for algo, m in metrics.items():
        steps = np.asarray(m["policy_steps"]).mean(0)
        with warnings.catch_warnings():  # iterations without an evaluation are NaN for every seed
            warnings.simplefilter("ignore", RuntimeWarning)
            ret = np.nanmean(np.asarray(m["eval_return"]), axis=0)
            value = np.nanmean(np.asarray(m["eval_costs"])[..., 0], axis=0)
        xi = np.asarray(m["xi"])
        dist = np.abs(xi - xi_c) / np.maximum(kappa, 1e-12)
        dist = dist.reshape(dist.shape[:2] + (-1,)).max(-1).mean(0)
        ok = np.isfinite(ret)
        kw = dict(look[algo], markevery=max(1, len(steps) // 8), ms=3)
        axes[0, 0].plot(steps[ok], ret[ok], label=algo, **kw)
        axes[0, 1].plot(steps[ok], value[ok], label=algo, **kw)
        if constrained(algo):  # an unconstrained learner's lambda is a constant it never reads
            axes[1, 0].plot(steps, np.asarray(m["lam"])[..., 0].mean(0), label=algo, **kw)
        axes[1, 1].plot(steps, dist, label=algo, **kw)
    titles = ["evaluation return", f"evaluation constraint value {cost} (kept when <= 0)",
              f"lambda of {cost} (constrained algorithms)", "max_i |xi_i - xi_c,i| / kappa_i"]  # fmt: skip
    for ax, t in zip(axes.ravel(), titles):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("policy steps")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"{env_name}: training curves (mean over seeds)")
    fit(fig)
    return fig


def plot_aggregate(out_dir, figures: dict, env_name: str) -> None:
    """The rliable figures of ``report.aggregate_section``: ``intervals.png`` (each
    algorithm's IQM with its interval) and ``profiles.png`` (performance profiles)."""
    plt = pyplot()
    metrics = list(figures)
    algos = list(next(iter(figures.values()))[0])
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 0.35 * len(algos) + 1.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        iqm = figures[metric][0]
        y = np.arange(len(algos))[::-1]
        for yi, a in zip(y, algos):
            point, low, high = iqm[a]
            ax.plot([low, high], [yi, yi], lw=6, alpha=0.5, solid_capstyle="butt")
            ax.plot([point], [yi], "k|", ms=12)
        ax.set_yticks(y)
        ax.set_yticklabels(algos if ax is axes[0][0] else [])
        ax.set_xlabel(f"IQM of {metric}")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{env_name}: IQM with 95% stratified-bootstrap intervals")
    save(fig, out_dir / INTERVALS)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        _, taus, profiles = figures[metric]
        for a, p in profiles.items():
            ax.plot(taus, p, label=a)
        ax.set_xlabel(f"{metric} threshold tau")
        ax.set_ylabel("fraction of (seed, kernel) scores > tau")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=6)
    fig.suptitle(f"{env_name}: performance profiles over the test kernels")
    save(fig, out_dir / PROFILES)
