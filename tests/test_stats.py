"""rcmdp_jax.stats on small hand-made arrays whose answers are worked out by hand."""

import numpy as np
import pytest

from rcmdp_jax import stats


def test_penalised_returns_per_episode():
    V = np.array([10.0, 4.0])
    C = np.array([[1.0, -2.0], [-1.0, -1.0]])  # m = 2
    out = stats.penalised_returns(V, C, lambda_max=3.0)
    np.testing.assert_allclose(out["Return"], [10.0, 4.0])
    # R_pen± = V - 3 * (C1 + C2): 10 - 3*(-1) = 13; 4 - 3*(-2) = 10
    np.testing.assert_allclose(out["R_pen±"], [13.0, 10.0])
    # R_pen = V - 3 * (max(0,C1) + max(0,C2)): 10 - 3 = 7; 4 - 0 = 4
    np.testing.assert_allclose(out["R_pen"], [7.0, 4.0])


def _arr():
    # axes (seed=2, level=2, direction=2, episode=1); environment scores (mean over seeds):
    #   level 0: dir 0 -> (1 + 3)/2 = 2, dir 1 -> (2 + 4)/2 = 3
    #   level 1: dir 0 -> (0 + 2)/2 = 1, dir 1 -> (6 + 8)/2 = 7
    x = np.zeros((2, 2, 2, 1))
    x[:, 0, 0, 0] = [1, 3]
    x[:, 0, 1, 0] = [2, 4]
    x[:, 1, 0, 0] = [0, 2]
    x[:, 1, 1, 0] = [6, 8]
    return x


def test_summary_mean_se_min_across_test_environments():
    s = stats.summarise(_arr())
    # scores 2, 3, 1, 7: mean 3.25; sample std sqrt(((1.25)^2+(.25)^2+(2.25)^2+(3.75)^2)/3) = sqrt(20.75/3)
    assert s.mean == pytest.approx(3.25)
    assert s.se == pytest.approx(np.sqrt(20.75 / 3) / 2)
    assert s.min == pytest.approx(1.0)


def test_mean_se_over_an_axis_and_of_one_value():
    # episodes 1, 2, 6: mean 3, sample std sqrt((4 + 1 + 9) / 2) = sqrt(7), se sqrt(7) / sqrt(3)
    mean, se = stats.mean_se(np.array([[1.0, 10.0], [2.0, 10.0], [6.0, 10.0]]))
    np.testing.assert_allclose(mean, [3.0, 10.0])
    np.testing.assert_allclose(se, [np.sqrt(7 / 3), 0.0])
    mean, se = stats.mean_se([[1.0, 2.0, 6.0]], axis=1)
    np.testing.assert_allclose((mean, se), ([3.0], [np.sqrt(7 / 3)]))
    # one value: its standard error is 0 (as a summary of one test environment), of the same shape as the mean
    mean, se = stats.mean_se(np.array([[4.0, -1.0]]))
    np.testing.assert_array_equal(mean, [4.0, -1.0])
    np.testing.assert_array_equal(se, [0.0, 0.0])
    assert stats.mean_se([4.0]) == (4.0, 0.0) and stats.summarise(np.ones((1, 1, 1, 1))).se == 0.0


def test_per_level_mean_and_se_across_directions():
    mean, se = stats.per_level(_arr())
    np.testing.assert_allclose(mean, [2.5, 4.0])
    # level 0: scores 2, 3 -> std (ddof 1) = sqrt(0.5), se = sqrt(0.5)/sqrt(2) = 0.5
    # level 1: scores 1, 7 -> std = sqrt(18), se = sqrt(18)/sqrt(2) = 3
    np.testing.assert_allclose(se, [0.5, 3.0])


def test_best_and_within_one_pooled_se_marking():
    s = {
        "A": stats.Summary(mean=10.0, se=2.0, min=0.0),
        "B": stats.Summary(mean=8.5, se=1.0, min=0.0),  # 1.5 <= sqrt((4 + 1)/2) = 1.58 -> marked
        "C": stats.Summary(mean=8.0, se=1.0, min=0.0),  # 2.0 >  1.58 -> not marked
        "D": stats.Summary(mean=7.0, se=4.0, min=0.0),  # 3.0 <= sqrt((4 + 16)/2) = 3.16 -> marked
    }
    assert stats.within_one_pooled_se(s) == {"A": True, "B": True, "C": False, "D": True}


def test_algorithm_table_uses_every_metric():
    V = np.ones((1, 1, 2, 2))
    C = np.zeros((1, 1, 2, 2, 1))
    C[..., 0] = 0.5
    table, marks = stats.algorithm_table({"X": (V, C), "Y": (V * 2, -C)}, lambda_max=10.0)
    assert table["Return"]["Y"].mean == pytest.approx(2.0)
    assert table["R_pen±"]["X"].mean == pytest.approx(1.0 - 5.0)
    assert table["R_pen±"]["Y"].mean == pytest.approx(2.0 + 5.0)
    assert table["R_pen"]["Y"].mean == pytest.approx(2.0)
    assert marks["Return"] == {"X": False, "Y": True}
    _, among_x = stats.algorithm_table({"X": (V, C), "Y": (V * 2, -C)}, 10.0, marked=["X"])  # Y's seeds diverged
    assert among_x["Return"] == {"X": True} and among_x["R_pen"] == {"X": True}
    assert stats.algorithm_table({}, 10.0, marked=[]) == ({m: {} for m in stats.METRICS},) * 2
