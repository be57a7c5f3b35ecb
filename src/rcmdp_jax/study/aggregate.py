"""Statistics people trust, from ``rliable`` (Agarwal et al., 2021): the interquartile
mean (IQM) across runs with stratified-bootstrap confidence intervals, the
probability of improvement between algorithms, and performance profiles.

A *run* is a seed, a *task* a test kernel of the robustness grid (level x
direction): each algorithm's scores are a ``[seeds, kernels]`` matrix of per-kernel
means of a test quantity (``Return`` or ``R_pen``, as ``stats.penalised_returns``
scores each episode). The study's mean +/- SE / min table (``stats``) stays as it is;
these sit next to it. ``pip install -e ".[stats]"`` installs rliable.
"""

from __future__ import annotations

import numpy as np

from rcmdp_jax import stats
from rcmdp_jax.study.plots import INTERVALS, PROFILES, fit
from rcmdp_jax.study.report_text import md_cell

# bootstrap resamples of the IQM intervals (rliable's default is 50,000; rliable's
# bootstrap runs in Python: 500 keep a 14-algorithm x 176-kernel report to seconds); read
# when a report is written (the test suite lowers it: its checks read the point estimates)
REPS = 500


def available() -> bool:
    try:
        import rliable.library  # noqa: F401
    except Exception:  # not installed, or its dependencies clash (e.g. arch with pandas 3)
        return False
    return True


def score_matrices(results: dict, lambda_max: float, metric: str) -> dict[str, np.ndarray]:
    """``{algo: [seeds, kernels]}``: the per-kernel mean of ``metric`` from the sweep's
    ``(V [S, L, D, E], C [S, L, D, E, m])``."""
    out = {}
    for algo, (V, C) in results.items():
        per_episode = stats.penalised_returns(V, C, lambda_max)[metric]  # [S, L, D, E]
        out[algo] = per_episode.mean(-1).reshape(per_episode.shape[0], -1).astype(np.float64)
    return out


def iqm_intervals(
    scores: dict[str, np.ndarray], reps: int | None = None, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """``{algo: (IQM, CI low, CI high)}``: the interquartile mean of all runs x tasks,
    with a 95% stratified-bootstrap interval (runs resampled within each task; ``reps``
    resamples, ``REPS`` unless given)."""
    from rliable import library as rly
    from rliable import metrics

    reps = REPS if reps is None else reps

    np.random.seed(seed)  # rliable draws from NumPy's global generator
    point, interval = rly.get_interval_estimates(scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps)
    return {a: (float(point[a][0]), float(interval[a][0, 0]), float(interval[a][1, 0])) for a in scores}


def probability_of_improvement(scores: dict[str, np.ndarray], pairs) -> dict:
    """``{(x, y): P(X > Y)}`` for each pair: the probability that a run of ``x`` beats a
    run of ``y`` on a task (Mann-Whitney U, ties count 1/2), averaged over tasks. Point
    estimates: rliable's bootstrap of it calls SciPy once per task and resample (about a
    second per pair and 10 resamples at 176 kernels), too slow for every report."""
    from rliable import metrics

    return {(x, y): float(metrics.probability_of_improvement(scores[x], scores[y])) for x, y in pairs}


def performance_profiles(scores: dict[str, np.ndarray], taus: np.ndarray) -> dict[str, np.ndarray]:
    """``{algo: [len(taus)]}``: the fraction of runs x tasks scoring above each ``tau``."""
    from rliable import library as rly

    profiles, _ = rly.create_performance_profile(scores, taus, reps=10)  # its intervals are not used
    return {a: np.asarray(p) for a, p in profiles.items()}


def section(results: dict, lambda_max: float, env_name: str, out_dir=None) -> tuple[str, dict]:
    """Markdown and JSON of the rliable statistics of one domain, for ``Return`` and
    ``R_pen``: IQM with its interval per algorithm, and the probability that the
    algorithm with the highest IQM improves on each other one; with ``out_dir``, the
    interval-estimate figure ``intervals.png`` and the profiles ``profiles.png``."""
    if not results:
        return "", {}
    js: dict = {}
    lines = [
        f"\n## Aggregate statistics across seeds and test kernels ({env_name}, rliable)\n",
        "Scores: each seed's mean over a test kernel's episodes, for every kernel of the grid. IQM: the mean of "
        f"the middle 50% of all (seed, kernel) scores; [95% stratified-bootstrap interval, {REPS} resamples]. "
        "P(best > algo) (point estimate): probability that a seed of the highest-IQM algorithm beats a seed of the other on a "
        "kernel, averaged over kernels.\n",
    ]
    figures = {}
    for metric in ("Return", "R_pen"):
        scores = score_matrices(results, lambda_max, metric)
        iqm = iqm_intervals(scores)
        best = max(iqm, key=lambda a: iqm[a][0])
        others = [a for a in scores if a != best]
        poi = probability_of_improvement(scores, [(best, a) for a in others]) if others else {}
        lo = min(s.min() for s in scores.values())
        hi = max(s.max() for s in scores.values())
        taus = np.linspace(lo, hi, 41)
        profiles = performance_profiles(scores, taus)
        js[metric] = {
            "iqm": {a: list(v) for a, v in iqm.items()},
            "best": best,
            "probability_of_improvement": {f"{x} > {y}": v for (x, y), v in poi.items()},
            "profile_taus": taus.tolist(),
            "profiles": {a: p.tolist() for a, p in profiles.items()},
        }
        lines += [f"\n### {metric}\n", f"| Algorithm | IQM [95% CI] | P({best} > algo) |", "|---|---|---|"]
        for a in scores:
            p = poi.get((best, a))
            cell = "—" if p is None else f"{p:.2f}"
            lines.append(f"| {md_cell(a)} | {iqm[a][0]:.2f} [{iqm[a][1]:.2f}, {iqm[a][2]:.2f}] | {cell} |")
        figures[metric] = (iqm, taus, profiles)
    if out_dir is not None:
        _plot(out_dir, figures, env_name)
    return "\n".join(lines) + "\n", js


def _plot(out_dir, figures: dict, env_name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fit(fig)
    fig.savefig(out_dir / INTERVALS, dpi=110)
    plt.close(fig)
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
    fit(fig)
    fig.savefig(out_dir / PROFILES, dpi=110)
    plt.close(fig)
