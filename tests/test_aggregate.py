"""The rliable statistics of the report (``report.aggregate_section``) on small hand-made score
matrices (values worked out by hand)."""

import numpy as np
import pytest

from rcmdp_jax.study import report

# 4 runs (seeds) x 2 tasks (kernels)
A = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
B = A - 100.0  # worse than A on every run of every task


def _results(**scores):
    """Test results whose per-kernel means are ``scores`` [seeds, kernels]: one level, one episode, C = 0."""
    return {a: (s[:, None, :, None], np.zeros(s.shape[:1] + (1,) + s.shape[1:] + (1, 1))) for a, s in scores.items()}


def test_iqm_is_the_mean_of_the_middle_half_of_all_scores(monkeypatch):
    monkeypatch.setattr(report, "REPS", 200)
    _, js = report.aggregate_section(_results(A=A, B=B), 50.0, "x")
    # all 8 scores sorted: 1 2 3 4 10 20 30 40; the middle half is 3 4 10 20 -> 9.25
    iqm = js["Return"]["iqm"]
    assert abs(iqm["A"][0] - 9.25) < 1e-9 and js["Return"]["best"] == "A"
    assert abs(iqm["B"][0] - (9.25 - 100.0)) < 1e-9
    low, high = iqm["A"][1], iqm["A"][2]
    assert 1.0 <= low <= 9.25 <= high <= 40.0  # an interval around the point, inside the data


def test_probability_of_improvement_by_hand():
    # per task, 4 x 4 pairs: against B all 16 won; against A itself 6 won, 4 ties (count 1/2) -> 0.5;
    # against A - 1.5: 13 of 16 on the first task, 10 of 16 on the second -> 23/32
    text, js = report.aggregate_section(_results(A=A, B=B, T=A.copy(), Y=A - 1.5), 50.0, "x")
    poi = js["R_pen"]["probability_of_improvement"]
    assert poi == pytest.approx({"A > B": 1.0, "A > T": 0.5, "A > Y": 23 / 32}, abs=1e-12)
    assert "| Algorithm | IQM [95% CI] | P(A > algo) |" in text and "| A | 9.25 [" in text
    assert text.count("| 0.72 |") == 2 and text.count("| — |") == 2  # Return and R_pen; the best has none


def test_performance_profile_counts_scores_above_tau():
    _, js = report.aggregate_section(_results(A=A), 50.0, "x")
    taus = np.asarray(js["Return"]["profile_taus"])
    np.testing.assert_allclose(taus, np.linspace(1.0, 40.0, 41))
    want = [np.mean(A > t) for t in taus]  # the fraction of the 8 scores above each tau
    np.testing.assert_allclose(js["Return"]["profiles"]["A"], want)


def test_the_scores_are_per_kernel_means_of_the_test_metric():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(3, 2, 4, 5))  # seeds, levels, directions, episodes
    C = rng.normal(size=(3, 2, 4, 5, 1))
    _, js = report.aggregate_section({"X": (V, C)}, 10.0, "x")
    scores = np.sort((V - 10.0 * np.maximum(C[..., 0], 0.0)).mean(-1).ravel())  # 3 seeds x 8 kernels
    assert js["R_pen"]["iqm"]["X"][0] == pytest.approx(scores[6:18].mean(), rel=1e-12)
    assert js["Return"]["iqm"]["X"][0] == pytest.approx(np.sort(V.mean(-1).ravel())[6:18].mean(), rel=1e-12)
