"""The reproduction report's verdicts (experiments/claims.py) on hand-made summaries."""

import claims


def _summary(means, ses=None, mins=None, marked=()):
    ses = ses or {}
    mins = mins or {}
    return {
        a: {m: {"mean": v, "se": ses.get(a, 1.0), "min": mins.get(a, v - 10), "marked": a in marked}
            for m in ("Return", "R_pen±", "R_pen")}
        for a, v in means.items()
    }  # fmt: skip


def test_ties_share_the_top_and_far_ahead_needs_two_pooled_ses():
    s = _summary({"MDPO-Lag": 5.0, "PPO-Lag": 5.0, "MCPMD-Lag": 1.0})
    _, check = claims.best_among("R_pen", "mean", ["MDPO-Lag"], "MDPO")
    assert check(s)[0]  # PPO-Lag ties with MDPO-Lag exactly: MDPO-Lag is (also) the best
    _, check = claims.far_ahead("R_pen", ["MDPO-Lag"], ["MCPMD-Lag"])
    assert check(s)[0]  # 4 > 2 * 1
    _, check = claims.far_ahead("R_pen", ["MDPO-Lag"], ["PPO-Lag"])
    assert not check(s)[0]
    _, check = claims.in_top("R_pen", "mean", ["PPO-Lag"], 1, "PPO-Lag")
    assert check(s)[0]


def test_judge_holds_partly_or_not():
    s = _summary({"A": 3.0, "B": 2.0, "C": 1.0}, marked={"A"})
    parts = [claims.top("Return", "A"), claims.top("Return", "B")]
    assert claims.judge(s, parts[:1])[0] == "holds"
    assert claims.judge(s, parts)[0] == "partly"
    assert claims.judge(s, parts[1:])[0] == "does not hold"
    verdict, lines = claims.judge(s, [claims.similar("Return", ["A", "B"], "A and B")])
    assert verdict == "does not hold" and "spread 1.0" in lines[0]  # 1.0 > 20% of the span 2.0
    assert claims.judge(s, [claims.worst_of("Return", "C", ["A", "B", "C"])])[0] == "holds"


def test_verdict_table_marks_missing_settings():
    table = claims.verdict_table({})
    assert table.count("not run") == len(claims.CLAIMS)
