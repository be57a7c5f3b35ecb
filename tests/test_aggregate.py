"""The rliable statistics on small hand-made score matrices (values worked out by hand)."""

import numpy as np

from rcmdp_jax.study import report

# 4 runs (seeds) x 2 tasks (kernels)
A = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
B = A - 100.0  # worse than A on every run of every task
TIES = A.copy()


def test_iqm_is_the_mean_of_the_middle_half_of_all_scores():
    # all 8 scores sorted: 1 2 3 4 10 20 30 40; the middle half is 3 4 10 20 -> 9.25
    iqm = report.iqm_intervals({"A": A, "B": B}, reps=200)
    assert abs(iqm["A"][0] - 9.25) < 1e-9
    assert abs(iqm["B"][0] - (9.25 - 100.0)) < 1e-9
    low, high = iqm["A"][1], iqm["A"][2]
    assert 1.0 <= low <= 9.25 <= high <= 40.0  # an interval around the point, inside the data


def test_probability_of_improvement_by_hand():
    poi = report.probability_of_improvement({"A": A, "B": B, "T": TIES}, [("A", "B"), ("B", "A"), ("A", "T")])
    assert poi[("A", "B")] == 1.0 and poi[("B", "A")] == 0.0
    # A against itself: per task, 4 x 4 pairs, 4 ties (count 1/2), 6 wins -> (6 + 2) / 16 = 0.5
    assert abs(poi[("A", "T")] - 0.5) < 1e-9


def test_performance_profile_counts_scores_above_tau():
    taus = np.array([0.0, 2.5, 15.0, 50.0])
    profiles = report.performance_profiles({"A": A}, taus)
    # scores > tau out of 8: all 8; 6 (3, 4, 10, 20, 30, 40); 3 (20, 30, 40); none
    np.testing.assert_allclose(profiles["A"], [1.0, 6 / 8, 3 / 8, 0.0])


def test_score_matrices_are_per_kernel_means_of_the_test_metric():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(3, 2, 4, 5))  # seeds, levels, directions, episodes
    C = rng.normal(size=(3, 2, 4, 5, 1))
    got = report.score_matrices({"X": (V, C)}, 10.0, "R_pen")["X"]
    want = (V - 10.0 * np.maximum(C[..., 0], 0.0)).mean(-1).reshape(3, 8)
    np.testing.assert_allclose(got, want)
