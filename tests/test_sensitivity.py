"""experiments/sensitivity.py's plan and its tables, on hand-made run folders: a column is
the start_value table with the rows its choice changes replaced, only from planned runs."""

import json

import sensitivity as sens


def _row(value):
    return {m: {"mean": value, "se": 0.1, "min": value - 1.0, "marked": False} for m in sens.METRICS}


def _write(out, reading, env, budget, rows):
    path = out / reading / f"{env}-{budget}" / env / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rows))


def test_plan_names_each_run_once_with_the_lanes_it_needs():
    planned = sens.runs()
    assert len(planned) == len(set(planned)) == sum(len(v) for v in sens.SETTINGS.values())
    for reading, env, budget in planned:
        algos = sens.algos_of(reading, env, budget)
        assert len(algos) == len(set(algos))
        if reading == "gae":  # MCPMD trains no critic
            assert not any(a.startswith(("MCPMD", "RMCPMD")) for a in algos)
        if reading == "start_value":
            lam = [a for a in algos if a.endswith("@lam_init=0")]
            assert len(lam) == (len(sens.CONSTRAINED) if f"{env}-{budget}" in sens.LAM_LANES_AT else 0)
        else:
            assert all("@" not in a for a in algos)


def test_column_splices_only_planned_runs(tmp_path):
    base = {a: _row(1.0) for a in sens.ALL}
    base.update({f"{a}@lam_init=0": _row(-5.0) for a in sens.CONSTRAINED})
    base.update({f"{a}@eta_xi={sens.eta_xi('cartpole'):g}": _row(7.0) for a in sens.ROBUST})
    _write(tmp_path, "start_value", "cartpole", "short", base)
    _write(tmp_path, "cost_to_go", "cartpole", "short", {a: _row(3.0) for a in sens.CONSTRAINED})
    assert ("cartpole", "short") not in sens.SETTINGS["start_value+dropout"]
    _write(tmp_path, "start_value+dropout", "cartpole", "short", {a: _row(9.0) for a in sens.CONSTRAINED})

    table, _ = sens.column(tmp_path, "cost_to_go", "cartpole", "short")
    for a in sens.ALL:
        want = 3.0 if a in sens.CONSTRAINED else 1.0
        assert table[a]["R_pen"]["mean"] == want
        # re-marked: the constrained rows (3.0, SE 0.1) are the best; 1.0 is not within one SE
        assert table[a]["R_pen"]["marked"] == (a in sens.CONSTRAINED)
    lam, _ = sens.column(tmp_path, "lam_init=0", "cartpole", "short")
    assert {a: lam[a]["Return"]["mean"] for a in sens.CONSTRAINED} == dict.fromkeys(sens.CONSTRAINED, -5.0)
    eta, _ = sens.column(tmp_path, "eta_xi x 0.1", "cartpole", "short")
    assert all(eta[a]["Return"]["mean"] == (7.0 if a in sens.ROBUST else 1.0) for a in sens.ALL)
    # a run outside the plan is never read, even when its folder exists
    assert sens.column(tmp_path, "start_value+dropout", "cartpole", "short") == (None, "not run")
    assert sens.column(tmp_path, "gae", "cartpole", "short") == (None, "not run")  # planned, not finished
    assert sens.column(tmp_path, "cost_to_go", "inventory", "short") == (None, "not run")  # no base table
