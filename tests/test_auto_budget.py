"""``--budget auto`` (``rcmdp_jax.auto_budget``): the budget rule read while training, stopping on
hand-made curves that converge and running to the cap on curves that do not; the command's
refusals; one real search (slow) that trains the run at the budget it found."""

import json

import numpy as np
import pytest
from test_cli_refusals import _refused

from rcmdp_jax import auto_budget
from rcmdp_jax.convergence import passes

STEPS = np.arange(1, 501) * 1_600.0  # 500 iterations of 1,600 policy steps: up to 800,000


def curves(level_at, seeds=10, noise=1.0, seed=0):
    """``{"return": [seeds, iterations]}``: ``level_at(steps)`` plus each seed's fixed offset and
    per-iteration noise, the same for every budget."""
    rng = np.random.default_rng(seed)
    offsets = rng.normal(size=(seeds, 1)) * noise
    return {"return": level_at(STEPS)[None, :] + offsets + rng.normal(size=(seeds, STEPS.size)) * 0.1 * noise}


def by_hand(c, budget):
    """The rule by hand for one budget: the seeds' window means at N and 2N (last fifth)."""
    a = c[:, (STEPS > 0.8 * budget) & (STEPS <= budget)].mean(1)
    b = c[:, (STEPS > 1.6 * budget) & (STEPS <= 2 * budget)].mean(1)
    return abs(b.mean() - a.mean()), b.std(ddof=1) / np.sqrt(b.size)


def test_stops_at_the_first_budget_whose_doubling_moves_less_than_its_standard_error():
    c = curves(lambda s: 100.0 * (1.0 - np.exp(-s / 20_000.0)))  # flat (to 1e-2) from ~100k steps on
    found, table = auto_budget.stop_at(c, STEPS)
    want = next(n for n in auto_budget.GRID if by_hand(c["return"], n)[0] < by_hand(c["return"], n)[1])
    assert found == want == 200_000  # 100k still moved by 1.1 (SE 0.25)
    m, se = by_hand(c["return"], found)
    assert table[found]["return"] == pytest.approx((m, se), rel=1e-6)
    # what the search saw at the time: the curves up to twice the budget only
    cut = STEPS <= 2 * found
    early, _ = auto_budget.stop_at({"return": c["return"][:, cut]}, STEPS[cut])
    assert early == found
    before, _ = auto_budget.stop_at({"return": c["return"][:, STEPS <= found]}, STEPS[STEPS <= found])
    assert before is None  # its doubling not yet reached: no verdict


def test_curves_that_keep_moving_run_to_the_cap():
    c = curves(lambda s: s / 1_000.0)  # +1.6 per iteration: every doubling moves by far more than the SE
    found, table = auto_budget.stop_at(c, STEPS)
    assert found is None and max(table) == 400_000  # every budget with its doubling inside 800k was read
    f = auto_budget.Found(found, int(STEPS[-1]), 800_000, table)
    assert f.budget == 800_000 and "not converged" in f.why()


def test_every_curve_must_pass_and_a_curve_at_its_maximum_passes():
    flat = curves(lambda s: 0.0 * s + 86.6, noise=0.0)  # every seed at the maximum: moved 0, SE 0
    moving = curves(lambda s: s / 1_000.0, seed=1)
    found, _ = auto_budget.stop_at(flat, STEPS)
    assert found == auto_budget.GRID[0]
    assert auto_budget.stop_at({**flat, "C[0]": moving["return"]}, STEPS)[0] is None  # one curve moves: none
    assert passes(0.0, 0.0) and not passes(0.1, 0.0) and passes(0.1, 0.2) and not passes(0.2, 0.2)


def test_found_says_which_budget_and_why():
    table = {100_000: {"return": (0.3, 0.9), "C[0]": (0.1, 0.5)}}
    f = auto_budget.Found(100_000, 200_000, 1_600_000, table)
    assert f.budget == 100_000
    assert "converged at 100,000" in f.why() and "return by 0.3 < SE 0.9" in f.why()


@pytest.mark.parametrize("argv,words", [
    (["--budget", "auto", "--seeds", "2", "--steps", "100000", "--plots", "off"], ["--seeds 3 or more"]),
    (["--budget", "auto", "--seeds", "3", "--steps", "20000", "--plots", "off"], ["at least 50,000"]),
    (["--budget", "sometimes", "--seeds", "3"], ["--budget: invalid choice: 'sometimes'", "auto"]),
])  # fmt: skip
def test_auto_refused_in_one_line_before_anything_compiles(capsys, tmp_path, argv, words):
    _refused(capsys, ["--env", "gymnax:CartPole-v1", "--algos", "PPO-Lag", *argv], tmp_path / "r", *words)


@pytest.mark.slow
def test_a_search_trains_the_run_at_the_budget_it_found(tmp_path, capsys):
    """The study's CartPole (episodes of up to 200 steps at 400 a batch): PPO-Lag searched to a cap of
    50k steps (the least the rule reads: 25k and its doubling) with 3 seeds; the run's configs and budget_auto.json agree with what it printed."""
    from rcmdp_jax.study import cli

    out = tmp_path / "auto"
    code = cli.main(["--env", "cartpole", "--algos", "PPO-Lag,PPO-Robust-Lag", "--seeds", "3", "--budget", "auto",
                     "--steps", "50000", "--n-test", "2", "--plots", "off", "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "budget_auto.json").read_text())["cartpole"]["ppo"]
    run = json.loads((out / "run.json").read_text())["configs"]["cartpole"]
    budget = record["converged"] or record["cap"]
    assert {c["total_timesteps"] for c in run.values()} == {budget}
    assert f"every algorithm trains at {budget:,} policy steps" in printed
    assert record["reached"] <= 50_000 + 1_600 and (record["converged"] is None or record["reached"] >= 2 * budget)


def test_a_study_domain_at_another_limit_gets_the_safe_defaults_and_the_study_its_own():
    import argparse

    from rcmdp_jax import preset
    from rcmdp_jax.study.plan import unmeasured_budget_notes

    study, other = preset("inventory", "PPO-Robust-Lag"), preset("inventory@cost_threshold=0.13", "PPO-Robust-Lag")
    assert study.option("ltma_dual_reading") == "found" and other.option("ltma_dual_reading") == "guarded"
    assert (study.total_timesteps, other.total_timesteps) == (16_000, 400_000)  # the rule's budget (docs/budgets.md)
    assert preset("inventory@cost_threshold=0.13", "PPO-Lag", "quick").total_timesteps == 16_000
    args = argparse.Namespace(budget="short", steps=None)
    names = ["cartpole", "inventory@cost_threshold=0.13", "cartpole@velocity_limit=1", "gymnax:Pendulum-v1",
             "gymnax:MountainCar-v0@uncertain=force:0.2@costs=velocity:0.04"]  # fmt: skip
    notes = unmeasured_budget_notes(names, args)
    assert len(notes) == 3
    assert "inventory@cost_threshold=0.13: the short budget is 400,000 policy steps" in notes[0]
    assert "cartpole@velocity_limit=1:" in notes[1] and "may stop early there: give --steps N" in notes[1]
    assert "gymnax:MountainCar-v0@" in notes[2] and "--budget auto trains" in notes[2]
    assert not any(n.startswith(("note: cartpole:", "note: gymnax:Pendulum-v1")) for n in notes)
    assert unmeasured_budget_notes(names, argparse.Namespace(budget="auto", steps=None)) == []


def test_the_search_reads_the_return_alone_without_constraints_and_names_each_constraint():
    metrics = {"eval_return": np.ones((3, 4)), "eval_costs": np.zeros((3, 4, 2)), "policy_steps": np.ones((3, 4))}
    assert set(auto_budget.curves_of(metrics)[0]) == {"return"}
    assert set(auto_budget.curves_of(metrics, ("speed", "torque"))[0]) == {"return", "C[speed]", "C[torque]"}
    from rcmdp_jax import preset

    unconstrained = auto_budget.plain_config([preset("cartpole", "PPO-Robust")])
    assert not unconstrained.robust and not unconstrained.constrained
    lag = auto_budget.plain_config([preset("cartpole", "MDPO-Robust-Lag:geometric-batch")])
    assert (lag.adversary, lag.constraint, lag.alpha_schedule) == ("none", "lagrangian", "fixed")
    assert auto_budget.plain_config([preset("cartpole", "PPO-Robust-Lag"), preset("cartpole", "PPO-Lag")]).name == "PPO-Lag"
    first = auto_budget.Found(auto_budget.GRID[0], 50_000, 100_000, {auto_budget.GRID[0]: {"return": (0.0, 0.0)}})
    assert "plateau the learners may leave" in first.why()


def test_resume_with_auto_takes_the_budgets_its_search_found_and_refuses_another_run(tmp_path, capsys):
    from rcmdp_jax.study import cli
    from rcmdp_jax.study.plan import build_plan
    from rcmdp_jax.study.run_folder import RunFolder

    argv = ["--env", "cartpole", "--algos", "PPO-Lag", "--seeds", "3", "--budget", "auto", "--steps", "60000"]
    plan = build_plan(cli.parse_args(argv))
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir()
    with pytest.raises(cli.PlanError, match="was not trained with --budget auto"):
        cli.searched_budgets(folder, plan)
    record = {"cartpole": {"ppo": {"converged": 25_000, "reached": 51_200, "cap": 60_000}}}
    (folder.root / "budget_auto.json").write_text(json.dumps(record))
    assert cli.searched_budgets(folder, plan) == {"cartpole": 25_000}
    record["cartpole"]["ppo"]["cap"] = 100_000  # searched with another --steps
    (folder.root / "budget_auto.json").write_text(json.dumps(record))
    with pytest.raises(cli.PlanError, match="searched up to 100,000"):
        cli.searched_budgets(folder, plan)
    record["cartpole"]["ppo"] |= {"cap": 60_000, "converged": None}  # none found: the cap
    (folder.root / "budget_auto.json").write_text(json.dumps(record))
    assert cli.searched_budgets(folder, plan) == {"cartpole": 60_000}
    for edited in ("25000x", True, -5, 2.5e4):  # an edited file: one line, never a budget of 1 or a traceback
        record["cartpole"]["ppo"]["converged"] = edited
        (folder.root / "budget_auto.json").write_text(json.dumps(record))
        with pytest.raises(cli.PlanError, match="no readable budget_auto.json"):
            cli.searched_budgets(folder, plan)


def test_margin_z_is_bounded():
    from rcmdp_jax import preset

    for bad in (-1.0, 101.0, 3e38, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"margin_z must be a number in \[0, 100\]"):
            preset("gymnax:Pendulum-v1", "PPO-Lag", margin_z=bad)


def test_the_search_reads_each_constraints_multiplier_and_says_when_one_did_not_decide():
    lam = np.zeros((10, STEPS.size, 2))
    lam[:, :, 1] = 0.5  # the torque limit binds throughout, the speed limit never
    c = curves(lambda s: 0.0 * s + 50.0, noise=1.0)["return"]
    drift = np.log2(STEPS / 1_600.0)[None, :] + curves(lambda s: 0.0 * s, seed=2)["return"]  # +1 a doubling
    metrics = {"eval_return": c, "eval_costs": np.stack([drift, c - 50.0], -1), "policy_steps": np.tile(STEPS, (10, 1)),
               "lam": lam}  # fmt: skip
    got, steps, mult = auto_budget.curves_of(metrics, ("speed", "torque"))
    np.testing.assert_array_equal(mult["C[torque]"], lam[..., 1])
    assert set(mult) == {"C[speed]", "C[torque]"}
    assert auto_budget.stop_at(got, steps)[0] is None  # the drifting speed curve fails every budget
    found, table = auto_budget.stop_at(got, steps, multipliers=mult)
    assert found == auto_budget.GRID[0] and len(table[found]["C[torque]"]) == 2
    why = auto_budget.Found(found, int(steps[-1]), 800_000, table).why()
    assert "C[speed] by" in why and "(not binding: its multiplier 0 in every seed; it does not decide)" in why
    assert f"C[torque] by {table[found]['C[torque]'][0]:.3g} < SE" in why
    assert auto_budget.curves_of({k: v for k, v in metrics.items() if k != "lam"}, ("speed",))[2] == {}
