"""The budget rule (``rcmdp_jax.convergence``) on hand-made training curves."""

import numpy as np

from rcmdp_jax.convergence import converged_budget, window_means

STEPS = np.arange(1, 161) * 10_000.0  # 160 iterations of 10k steps: up to 1.6M
GRID = (50_000, 100_000, 200_000, 400_000, 800_000)
OFFSETS = np.array([-0.2, 0.2, -0.2, 0.2])[:, None]  # four seeds: the standard error is 0.2 / 2 * sqrt(4/3)


def test_window_means_read_the_last_fifth_up_to_the_budget():
    curve = np.tile(STEPS, (2, 1))
    np.testing.assert_allclose(window_means(curve, STEPS, 100_000), [95_000.0, 95_000.0])  # steps in (80k, 100k]
    assert window_means(curve, STEPS, 5_000)[0] == 10_000.0  # before the first iteration: the first


def test_the_rule_picks_the_first_budget_whose_doubling_moves_nothing_beyond_its_error():
    rising = np.minimum(STEPS, 400_000) / 100_000  # rises to 4 at 400k, flat after
    curves = {"return": rising[None] + OFFSETS, "C": -rising[None] / 2 + OFFSETS}
    found, table = converged_budget(curves, STEPS, GRID)
    # at 400k the window (320k, 400k] still rises (3.3 .. 4.0, mean 3.65, against 4 at 800k: moved
    # 0.35 > SE 0.115);
    # at 800k both windows are flat
    assert found == 800_000
    moved, se = table[400_000]["return"]
    np.testing.assert_allclose(moved, 0.35, rtol=1e-9)
    np.testing.assert_allclose(se, 0.2 * np.sqrt(4 / 3) / 2, rtol=1e-6)
    assert table[800_000]["C"][0] == 0.0


def test_a_curve_that_never_settles_has_no_converged_budget():
    curves = {"return": STEPS[None] / 100_000 + OFFSETS}
    found, table = converged_budget(curves, STEPS, GRID)
    assert found is None and set(table) == set(GRID)  # every budget whose double was trained was judged


def test_a_plateau_that_training_leaves_is_not_convergence():
    # flat at 0 up to 100k, then a step to 2 between 100k and 200k, flat after: the 50k budget's
    # doubling moves nothing (a plateau), 100k's moves by 2, and from 200k on nothing moves
    step = np.where(STEPS > 150_000, 2.0, 0.0)
    curves = {"return": step[None] + OFFSETS}
    found, table = converged_budget(curves, STEPS, GRID)
    assert table[50_000]["return"][0] == 0.0 and table[100_000]["return"][0] > 1.0
    assert found == 200_000


def test_a_constraint_that_does_not_bind_does_not_decide_and_one_that_binds_once_does():
    # the return flat from the start; C drifts by 1 a doubling with the seeds agreeing (SE 0.115): it
    # alone fails every budget. Its multiplier 0 everywhere: the return decides, the first budget passes.
    flat = np.zeros_like(STEPS)[None] + OFFSETS
    drift = np.log2(STEPS / 10_000.0)[None] + OFFSETS
    curves = {"return": flat, "C": drift}
    assert converged_budget(curves, STEPS, GRID)[0] is None
    lam = np.zeros((4, STEPS.size))
    found, table = converged_budget(curves, STEPS, GRID, multipliers={"C": lam})
    assert found == GRID[0] and all(len(table[n]["C"]) == 3 and table[n]["C"][2] is False for n in GRID)
    assert table[GRID[0]]["C"][:2] == converged_budget(curves, STEPS, GRID)[1][GRID[0]]["C"]  # the same move
    # one seed's multiplier above 0 at one iteration, at 700k: the window (640k, 1.6M] of 800k and
    # (320k, 800k] of 400k hold it, so those two read C again (and fail); (160k, 400k] of 200k does not
    lam[2, np.flatnonzero(STEPS == 700_000)] = 0.01
    found, table = converged_budget(curves, STEPS, GRID, multipliers={"C": lam})
    assert [len(table[n]["C"]) for n in GRID] == [3, 3, 3, 2, 2]
    assert found is None  # 800k, the last budget measured, fails on C: no budget from which on all pass
    lam[2] = 0.0
    lam[:, STEPS <= 150_000] = 1.0  # binding at the start only: from 200k's window on it does not
    found, table = converged_budget(curves, STEPS, GRID, multipliers={"C": lam})
    assert [len(table[n]["C"]) for n in GRID] == [2, 2, 3, 3, 3] and found == 200_000
