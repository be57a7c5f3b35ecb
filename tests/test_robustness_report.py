"""The robustness benchmark's report (experiments/robustness_report.py): the share of the gap to
the feasible bound a method closes, and the calibration rule, against hand-computed cases."""

import numpy as np
import pytest
from robustness_report import calibrated, gap_closed, render


def test_gap_closed_by_hand():
    # none's mean worst C is 2, the bound -1: a method at 0.5 closes (2 - 0.5) / 3 = 0.5 of the gap
    assert gap_closed([1.0, 3.0], [0.0, 1.0], -1.0) == pytest.approx(0.5)
    assert gap_closed([1.0, 3.0], [-1.0, -1.0], -1.0) == pytest.approx(1.0)
    assert gap_closed([-2.0], [-3.0], -1.0) is None  # none already below the bound: no gap
    # none at the bound within two of its seeds' standard errors (0.001): a gap of noise, no ratio
    assert gap_closed([-0.401, -0.403], [4.6, 4.6], -0.4039) is None
    assert gap_closed([-0.301, -0.303], [-0.35, -0.35], -0.4025) == pytest.approx(0.048 / 0.1005)


def test_calibration_rule():
    keep = {"least_worst_C": -1.0, "keepable": True}
    assert calibrated([0.5, 1.0, -0.2, 2.0], keep)[0]  # bound -1 <= -0.1 * (0.825 + 1); 3/4 seeds broken
    assert not calibrated([0.5, -1.0, -0.2, -2.0], keep)[0]  # 1/4 seeds broken: nothing to gain
    assert not calibrated([30.0, 30.0], keep)[0]  # margin 3.1 needed, the bound gives 1
    ok, why = calibrated([1.0, 1.0], {"least_worst_C": 0.5, "keepable": False})
    assert not ok and "not keepable" in why
    assert calibrated([1.0], None) == (False, "no feasibility check")


def test_report_rows_carry_the_gap_and_the_verdict():
    worst = {"none": [1.0, 3.0], "corners": [0.0, 1.0]}
    row = lambda c: {"seeds": 2, "trained": 2, "C_nominal": np.array([-1.0, -1.0]), "C_grid": np.array(c),
                     "C_search": np.array(c), "C_worst": np.array(c), "R_pen_nominal": np.array([1.0, 1.0]),
                     "R_pen_worst": np.array([0.0, 0.0])}  # fmt: skip
    name = lambda lr, m: lr if m == "none" else f"{lr}+{m}"
    table = {"gymnax:Toy": {"rows": {name("PPO-Lag", m): row(c) for m, c in worst.items()},
                            "poi": {"PPO-Lag": {"corners": (0.8, 0.6, 0.9)}},
                            "feasible": {"least_worst_C": -1.0, "keepable": True}}}  # fmt: skip
    md, js = render(table, {"seeds": 2}, ("PPO-Lag",), ("none", "corners"), name)
    assert js["settings"]["gymnax:Toy"]["PPO-Lag+corners"]["gap_closed"] == pytest.approx(0.5)
    assert js["calibration"]["gymnax:Toy"]["PPO-Lag"]["passes"]
    assert "| 0.50 |" in md and "PPO-Lag passes" in md
    assert js["on_calibrated"]["pairs"] == [("gymnax:Toy", "PPO-Lag")]
    assert js["on_calibrated"]["methods"]["corners"] == {"wins": 1, "gap": pytest.approx(0.5)}
    # a bound that does not keep the constraint: no gap to close, and the pair is not calibrated
    table["gymnax:Toy"]["feasible"] = {"least_worst_C": 0.5, "keepable": False}
    md, js = render(table, {"seeds": 2}, ("PPO-Lag",), ("none", "corners"), name)
    assert js["settings"]["gymnax:Toy"]["PPO-Lag+corners"]["gap_closed"] is None
    assert js["on_calibrated"]["pairs"] == [] and "## On the calibrated settings" not in md


def test_goal_counts_the_default_and_the_nominal_breakers():
    # 10 seeds: the default (corners) breaks on its worst kernel in 2 (8 kept: enough), closes
    # (2 - (-0.5)) / (2 - (-1)) = 0.83 of the gap; none breaks at the nominal kernel in 2 seeds (> 1)
    def row(worst, nominal, r):
        return {"seeds": 10, "trained": 10, "C_nominal": np.array(nominal), "C_grid": np.array(worst),
                "C_search": np.array(worst), "C_worst": np.array(worst), "R_pen_nominal": np.full(10, r),
                "R_pen_worst": np.zeros(10)}  # fmt: skip
    name = lambda lr, m: lr if m == "none" else f"{lr}+{m}"
    corners_worst = [1.0, 1.0] + [-1.25] * 8  # mean -0.8
    rows = {"PPO-Lag": row([2.0] * 10, [0.5, 0.5] + [-1.0] * 8, 10.0),
            "PPO-Lag+corners": row(corners_worst, [-1.0] * 10, 7.0)}
    rows["PPO-Lag"]["V_nominal"] = np.full(10, 12.0)  # the return, not R_pen, is what robustness costs
    rows["PPO-Lag+corners"]["V_nominal"] = np.array([8.0, 10.0] * 5)
    table = {"gymnax:Toy": {"rows": rows, "poi": {"PPO-Lag": {"corners": (0.8, 0.6, 0.9)}},
                            "feasible": {"least_worst_C": -1.0, "keepable": True}, "default": "corners"}}
    md, js = render(table, {"seeds": 10}, ("PPO-Lag",), ("none", "corners"), name)
    (g,) = js["goal"]["rows"]
    assert (g["kept"], g["seeds"]) == (8, 10)
    assert g["gap"] == pytest.approx((2.0 - np.mean(corners_worst)) / 3.0)
    assert g["nominal_breakers"] == [("PPO-Lag", 2, 10)] and not g["met"]
    assert (g["r_none"], g["r_default"]) == (12.0, 9.0) and "12.00 → 9.00" in md
    # none keeps it at the nominal kernel in 9 of 10: the goal is met
    rows["PPO-Lag"]["C_nominal"] = np.array([0.5] + [-1.0] * 9)
    md, js = render(table, {"seeds": 10}, ("PPO-Lag",), ("none", "corners"), name)
    assert js["goal"]["rows"][0]["met"] and js["goal"]["met"] == 1 and "Met on 1/1" in md


def test_a_run_of_fewer_methods_reports_the_rows_it_has():
    row = lambda c: {"seeds": 2, "trained": 2, "C_nominal": np.array([-1.0, -1.0]), "C_grid": np.array(c),
                     "C_search": np.array(c), "C_worst": np.array(c), "R_pen_nominal": np.array([1.0, 1.0]),
                     "R_pen_worst": np.array([0.0, 0.0])}  # fmt: skip
    name = lambda lr, m: lr if m == "none" else f"{lr}+{m}"
    table = {"gymnax:Toy": {"rows": {"PPO-Lag": row([1.0, 3.0]), "PPO-Lag+corners": row([0.0, 1.0])},
                            "poi": {"PPO-Lag": {"corners": (0.8, 0.6, 0.9)}}, "default": "dr",
                            "feasible": {"least_worst_C": -1.0, "keepable": True}}}  # fmt: skip
    # MDPO-Lag did not run at all (robustness.py --learners), dr for neither (--methods)
    md, js = render(table, {"seeds": 2}, ("PPO-Lag", "MDPO-Lag"), ("none", "corners", "dr"), name,
                    outside=("gymnax:Toy",))
    assert "| PPO-Lag+corners |" in md and "PPO-Lag+dr" not in md and "MDPO" not in md
    assert js["goal"]["rows"] == [] and [r[0] for r in js["default_rule"]] == ["corners"]


def test_a_settings_parts_replace_the_rows_of_the_same_algorithm(tmp_path, monkeypatch):
    import json

    import robustness

    env = "gymnax:CartPole-v1"
    runs = tmp_path / "runs"
    made = {"gymnax-CartPole-v1": ("PPO-Lag", "PPO-Lag+search"), "gymnax-CartPole-v1.restarts": ("PPO-Lag+search",),
            "gymnax-CartPole-v1.a-dr": ("PPO-Lag+dr",), "gymnax-CartPole-v1.empty": None}  # fmt: skip
    for folder, algos in made.items():
        (runs / folder).mkdir(parents=True)
        if algos is not None:  # a part whose run never started holds no run.json: not read
            cfgs = {a: {"total_timesteps": 1000} for a in algos}
            (runs / folder / "run.json").write_text(json.dumps({"configs": {env: cfgs}}))
    assert [p.name for p in robustness.run_dirs(tmp_path, env)] == [
        "gymnax-CartPole-v1", "gymnax-CartPole-v1.a-dr", "gymnax-CartPole-v1.restarts"]  # fmt: skip
    c = lambda x: np.array([x, x])  # noqa: E731
    monkeypatch.setattr(robustness, "seed_table", lambda folder, e, a: {"from": folder.name, "C_worst": c(1.0)})
    monkeypatch.setattr(robustness, "SETTINGS", (env,))
    monkeypatch.setattr(robustness, "feasible_bound", lambda out, e: None)
    monkeypatch.setattr(robustness, "poi_vs_none", lambda rows, lr, methods, name: {})
    monkeypatch.setattr(robustness, "default_method", lambda e: "worst-of-n")
    block = robustness.evidence(tmp_path)[env]
    assert {a: r["from"] for a, r in block["rows"].items()} == {
        "PPO-Lag": "gymnax-CartPole-v1", "PPO-Lag+dr": "gymnax-CartPole-v1.a-dr",
        "PPO-Lag+search": "gymnax-CartPole-v1.restarts"}  # fmt: skip
    assert block["parts"] == {"PPO-Lag+dr": "gymnax-CartPole-v1.a-dr", "PPO-Lag+search": "gymnax-CartPole-v1.restarts"}
    # one setting, one budget: a part at another budget is refused
    (runs / "gymnax-CartPole-v1.z").mkdir()
    (runs / "gymnax-CartPole-v1.z" / "run.json").write_text(
        json.dumps({"configs": {env: {"PPO-Lag+corners": {"total_timesteps": 2000}}}}))
    with pytest.raises(SystemExit, match="different budgets"):
        robustness.evidence(tmp_path)
