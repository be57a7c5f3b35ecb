"""Statistics of the robustness test (docs/method.md §4), in plain NumPy.

Inputs are per-episode results with axes ``(seed, level, direction, episode)``:
``V`` the discounted return and ``C`` (trailing axis ``m``) the discounted
constraint values. A *test environment* is one (level, direction) pair; its
score is the mean over seeds and episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

METRICS = ("Return", "R_pen±", "R_pen")


def r_pen(V, C, lambda_max: float, xp=np):
    """``R_pen = V - lmax sum_j max(0, C_j)`` (docs/method.md §4): ``V [...]``, ``C [..., m]``;
    ``xp`` NumPy or jax.numpy (the worst-case search's objective)."""
    return V - lambda_max * xp.maximum(C, 0.0).sum(-1)


def penalised_returns(V: np.ndarray, C: np.ndarray, lambda_max: float) -> dict[str, np.ndarray]:
    """Per episode: ``Return = V``, ``R_pen± = V - lmax sum_j C_j``, ``R_pen`` (``r_pen``)."""
    V, C = np.asarray(V, np.float64), np.asarray(C, np.float64)
    return {"Return": V, "R_pen±": V - lambda_max * C.sum(-1), "R_pen": r_pen(V, C, lambda_max)}


@dataclass(frozen=True)
class Summary:
    """Mean over everything; standard error and minimum across test environments."""

    mean: float
    se: float
    min: float


def environment_scores(x: np.ndarray) -> np.ndarray:
    """``(seed, level, direction, episode) -> (level, direction)``: mean over seeds and episodes."""
    return np.asarray(x, np.float64).mean(axis=(0, 3))


def mean_se(x, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The mean of ``x`` over ``axis`` and its standard error, ``std (ddof=1) / sqrt(n)``
    (0 where there is one value)."""
    x = np.asarray(x, np.float64)
    n = x.shape[axis]
    se = x.std(axis=axis, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(np.delete(x.shape, axis))
    return x.mean(axis=axis), se


def summarise(x: np.ndarray) -> Summary:
    scores = environment_scores(x).ravel()
    return Summary(mean=float(np.mean(x)), se=float(mean_se(scores)[1]), min=float(scores.min()))


def per_level(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error across each level's directions: two arrays ``(level,)``."""
    return mean_se(environment_scores(x), axis=1)


def within_one_pooled_se(summaries: dict[str, Summary]) -> dict[str, bool]:
    """Mark the best mean and every ``a`` with ``best - mean_a <= sqrt((SE_best^2 + SE_a^2) / 2)``."""
    best_name = max(summaries, key=lambda k: summaries[k].mean)
    best = summaries[best_name]
    return {name: bool(best.mean - s.mean <= np.sqrt((best.se**2 + s.se**2) / 2.0)) for name, s in summaries.items()}


def algorithm_table(results: dict[str, tuple[np.ndarray, np.ndarray]], lambda_max: float, marked=None):
    """``{algo: (V, C)} -> {metric: {algo: Summary}}`` and ``{metric: {algo: marked}}``, the marks among
    the algorithms ``marked`` only (default: all; the study's: those with no diverged seed)."""
    per_metric: dict[str, dict[str, Summary]] = {m: {} for m in METRICS}
    for algo, (V, C) in results.items():
        for metric, x in penalised_returns(V, C, lambda_max).items():
            per_metric[metric][algo] = summarise(x)
    among = list(results) if marked is None else list(marked)
    marks = {m: within_one_pooled_se({a: s[a] for a in among}) if among else {} for m, s in per_metric.items()}
    return per_metric, marks
