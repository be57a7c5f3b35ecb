"""The budget rule: the training budget at which a learner has converged, read from its training
curves (docs/robustness.md, "Budgets").

The rule, written before any benchmark was run on it: budget ``N`` (on a doubling grid) has
converged when doubling it moves the seeds' mean of every curve (the deterministic policy's
return and each constraint's value, ``eval_return`` / ``eval_costs`` of the non-robust learner at
the nominal kernel) by less than that mean's standard error over seeds at ``2N``. Each curve is
read as its mean over a window, the last ``window`` share of the iterations up to the budget, so
that one evaluation's noise does not decide it. The converged budget is the smallest such ``N``.

Amended after its first run on the study's Inventory (docs/budgets.md): a budget counts only when
every larger budget of the grid that was measured passes too, so that a plateau that training later
leaves (Inventory: seeds switch to the costly order between 50k and 100k steps after a flat start)
is not read as convergence. On the curves measured before the amendment (Pendulum-v1, CartPole-v1)
the two readings agree. A second amendment, for ``--budget auto``: a curve that does not move at
all passes even when its standard error is 0 (every seed at a return's maximum, CartPole-v1's
86.6), where "less than" alone would never let it pass. A third, after ``--budget auto`` ran to its cap
on a user's CartPole box whose speed limit never bound (the multiplier 0 in every seed after the
first 1.3 % of the iterations, ``C`` 60 below the limit and drifting by 4 a doubling): a constraint
whose multiplier is 0 in every seed at every iteration from budget ``N``'s window to ``2N`` does not
decide ``N`` (the learner is not optimising it there; the robustness test still judges it). It
changes none of the budgets measured before it (docs/budgets.md: in each, the budget just below
the converged one, or the last measured where none converged, failed on its return).
"""

from __future__ import annotations

import numpy as np


def window_means(curve: np.ndarray, steps: np.ndarray, budget: float, window: float = 0.2) -> np.ndarray:
    """Each seed's mean of ``curve [seeds, iterations]`` over the iterations whose cumulative
    policy steps ``steps [iterations]`` lie in ``((1 - window) * budget, budget]``: ``[seeds]``."""
    steps = np.asarray(steps, float)
    pick = (steps > (1.0 - window) * budget) & (steps <= budget)
    if not pick.any():  # a budget between two iterations: the iteration that reaches it
        pick = np.arange(steps.size) == min(np.searchsorted(steps, budget), steps.size - 1)
    return np.nanmean(np.asarray(curve, float)[:, pick], axis=1)


def moved(curve: np.ndarray, steps: np.ndarray, budget: float, window: float = 0.2) -> tuple[float, float]:
    """``(|mean at 2 * budget - mean at budget|, the standard error over seeds at 2 * budget)``; a
    move within float rounding (relative 1e-6) is 0."""
    a, b = window_means(curve, steps, budget, window), window_means(curve, steps, 2 * budget, window)
    se = np.std(b, ddof=1) / np.sqrt(b.size) if b.size > 1 else np.inf
    mean_a, mean_b = float(np.mean(a)), float(np.mean(b))
    still = np.isclose(mean_b, mean_a, rtol=1e-6, atol=1e-9)  # not moved but for the sums' rounding
    return 0.0 if still else abs(mean_b - mean_a), float(se)


def passes(moved_by: float, se: float) -> bool:
    """One curve at one budget: it moved by less than its standard error, or not at all (seeds that
    agree exactly, e.g. a return at its maximum, have a standard error of 0)."""
    return moved_by < se or (moved_by == 0.0 and se == 0.0)


def binding(multiplier: np.ndarray, steps: np.ndarray, budget: float, window: float = 0.2) -> bool:
    """Whether a constraint binds between ``budget``'s window and its doubling: its multiplier
    ``[seeds, iterations]`` above 0 in some seed at some iteration in ``((1 - window) * budget, 2 * budget]``."""
    steps = np.asarray(steps, float)
    pick = (steps > (1.0 - window) * budget) & (steps <= 2 * budget)
    return bool(np.any(np.asarray(multiplier, float)[:, pick] > 0))


def row_passes(row: dict) -> bool:
    """One budget's ``{name: (moved, se)}``: every curve passes but a constraint's that did not
    bind, ``(moved, se, False)``, which does not decide."""
    return all(passes(v[0], v[1]) for v in row.values() if len(v) == 2)


def converged_budget(curves: dict[str, np.ndarray], steps: np.ndarray, grid, window: float = 0.2,
                     multipliers: dict[str, np.ndarray] | None = None):  # fmt: skip
    """The smallest budget of ``grid`` (each with ``2 * budget`` within the curves) from which on
    no curve of ``curves`` (``name -> [seeds, iterations]``) moves by its standard error when the
    budget doubles, at that budget and every larger one measured; None when none has. Also each
    budget's ``{name: (moved, se)}``. ``multipliers``: ``{name: [seeds, iterations]}``, the
    multiplier of the constraint whose value a curve is; where it did not bind (``binding``) the
    curve's entry is ``(moved, se, False)`` and does not decide."""
    table, found, multipliers = {}, None, multipliers or {}
    for n in sorted(grid):
        if 2 * n > float(np.max(steps)) + 1e-9:
            break
        table[n] = {}
        for name, c in curves.items():
            m, se = moved(c, steps, n, window)
            idle = name in multipliers and not binding(multipliers[name], steps, n, window)
            table[n][name] = (m, se, False) if idle else (m, se)
        if row_passes(table[n]):
            found = n if found is None else found
        else:
            found = None  # it moved again: an earlier pass was a plateau
    return found, table
