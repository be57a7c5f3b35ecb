"""The verdict of a constraint (``rcmdp_jax.verdict``) on hand-made episodes: an indicator
with a budget judged by its episode cost (early-ending episodes included), a continuous
constraint judged by C, the three counts, and how many episodes would decide a close seed;
and the report's constraint section against its own summary.json entries."""

import math

import numpy as np
import pytest

from rcmdp_jax import verdict
from rcmdp_jax.study import report


def mean_se(x):
    x = np.asarray(x, np.float64)
    return x.mean(), x.std(ddof=1) / math.sqrt(x.size)


def test_a_budget_is_judged_by_ep_cost_with_early_ending_episodes_against_the_whole_budget():
    budget, horizon = 5.0, 200
    ep_cost = np.array([3.0, 4.0, 4.0, 5.0])  # unsafe steps per episode
    length = np.array([100, 120, 100, 80])  # every episode ends early (the pole fell)
    C = ep_cost - budget * length / horizon  # what training reads: each granted B*T/H
    assert np.all(C > 0)  # by C every episode breaks it
    kind = verdict.Constraint("budget", gamma_c=1.0, budget=budget)
    assert kind.by_ep_cost and kind.decides == "EpCost <= 5"
    x = verdict.episode_values(kind, C, ep_cost)
    np.testing.assert_array_equal(x, [-2.0, -1.0, -1.0, 0.0])
    v = verdict.seed_verdicts(x[None])
    m, se = mean_se([-2.0, -1.0, -1.0, 0.0])
    assert abs(m) > 2 * se and v.verdict == ("kept",)  # mean EpCost 4 <= 5
    assert v.mean[0] == pytest.approx(m) and v.se[0] == pytest.approx(se)
    # the same numbers read as C (a discounted budget, or a limit): broken
    discounted = verdict.Constraint("budget", gamma_c=0.99, budget=budget)
    assert discounted.decides == "C <= 0"
    assert verdict.seed_verdicts(verdict.episode_values(discounted, C, ep_cost)[None]).verdict == ("broken",)
    assert verdict.seed_verdicts(verdict.episode_values(verdict.Constraint("limit"), C, ep_cost)[None]).verdict == (
        "broken",)
    # a file without EpCost: C decides even for a budget
    assert np.array_equal(verdict.episode_values(kind, C, None), C)


def test_a_continuous_constraint_three_verdicts_and_the_episodes_that_decide():
    x = np.array([
        [-1.0, -1.2, -0.8, -1.1, -0.9],  # kept: mean -1, far below 0
        [0.9, 1.1, 1.0, 1.2, 0.8],  # broken
        [0.5, -0.3, 0.2, -0.1, 0.1],  # mean 0.08: within two standard errors of 0
    ])  # fmt: skip
    v = verdict.seed_verdicts(x)
    by_hand = []
    for row in x:
        m, se = mean_se(row)
        by_hand.append("too close to call" if abs(m) <= 2 * se else "kept" if m <= 0 else "broken")
    assert list(v.verdict) == by_hand == ["kept", "broken", "too close to call"]
    assert v.counts() == {"kept": 1, "broken": 1, "too close to call": 1}
    assert v.needed[:2] == (None, None)
    n = v.needed[2]
    m, se = mean_se(x[2])
    sd = se * math.sqrt(5)
    assert 2 * sd / math.sqrt(n) < abs(m) <= 2 * sd / math.sqrt(n - 1)  # the fewest that decide it
    assert v.most_needed() == n
    assert verdict.counts_text(v.counts(), v.most_needed()) == f"1 kept, 1 broken, 1 too close ({n} episodes decide)"
    assert verdict.overall(v.counts()) is False
    assert verdict.overall(verdict.seed_verdicts(x[[0, 2]]).counts()) is None
    assert verdict.overall(verdict.seed_verdicts(x[[0]]).counts()) is True


def test_no_spread_or_one_episode_the_sign_decides():
    v = verdict.seed_verdicts(np.array([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5]]))
    assert v.verdict == ("kept", "broken") and v.most_needed() is None
    assert verdict.seed_verdicts(np.array([[0.3], [-0.3]])).verdict == ("broken", "kept")
    close_at_zero = verdict.seed_verdicts(np.array([[1.0, -1.0]]))
    assert close_at_zero.verdict == ("too close to call",) and close_at_zero.most_needed() is None
    assert verdict.counts_text(close_at_zero.counts(), None).endswith("(a mean of exactly 0)")


def test_the_kinds_of_an_environments_constraints():
    from rcmdp_jax import envs

    env, _ = envs.make("gymnax:CartPole-v1@costs=x>0.3:5,x>0.2,x:0.3")
    budget, never, limit = verdict.kinds(env)
    assert (budget.kind, budget.budget) == ("budget", 5.0)
    assert (never.kind, never.budget) == ("budget", 0.0)  # 'FIELD>LIMIT': a budget of 0 unsafe steps
    assert limit == verdict.Constraint("limit")
    cartpole, _ = envs.make("cartpole")
    assert verdict.kinds(cartpole) == [verdict.Constraint("limit")]


def test_the_section_rows_say_what_summary_json_holds():
    rng = np.random.default_rng(0)
    S, L, D, E = 3, 3, 2, 6
    ep = rng.integers(0, 9, size=(S, L, D, E, 1)).astype(np.float64)  # unsafe steps
    length = rng.integers(50, 201, size=(S, L, D, E, 1))
    C = ep - 5.0 * length / 200  # indicator, budget 5, H = 200, gamma_c = 1
    ep[:, 2, 1] += 6.0  # the worst kernel by EpCost: level 2, direction 1
    C[:, 2, 1] = ep[:, 2, 1] - 5.0 * length[:, 2, 1] / 200
    C[:, 1, 0] += 20.0  # C's own highest kernel is another: the verdict follows EpCost's
    costs = {"A": {"EpCost": ep, "gamma_c": np.array([1.0]), "horizon": 200}}
    kinds = [verdict.Constraint("budget", budget=5.0)]
    margins = {"A": {"cost_margin": 3.0, "constraint_rule": "lag", "rule": "cost_margin = 3, trained toward C <= -3"}}
    text, js = report.constraint_section({"A": (None, C)}, ("unsafe",), np.array([0.0, 0.5, 1.0]), costs=costs,
                                         kinds=kinds, margins=margins)  # fmt: skip
    e = js["A"]["unsafe"]
    assert (e["worst_level_index"], e["worst_direction"]) == (2, 1)
    assert e["kind"] == "budget" and e["budget"] == 5.0 and e["gamma_c"] == 1.0 and e["decides"] == "EpCost <= 5"
    assert e["margin"]["cost_margin"] == 3.0 and "A: cost_margin = 3, trained toward C <= -3." in text
    ep[:, 0] = ep[:, 0, :1]  # level 0's directions: one kernel, the same episodes (common random numbers)
    C[:, 0] = C[:, 0, :1]
    for where, pick in (("nominal", lambda a: a[:, 0, 0]), ("worst", lambda a: a[:, 2, 1])):
        per_seed = pick(ep[..., 0]) - 5.0
        want = []
        for row in per_seed:
            m, se = mean_se(row)
            want.append("too close to call" if se > 0 and abs(m) <= 2 * se else "kept" if m <= 0 else "broken")
        assert e[f"{where}_verdicts"] == want
        assert e[f"{where}_counts"] == {k: want.count(k) for k in ("kept", "broken", "too close to call")}
        assert e[f"{where}_seeds_broken"] == want.count("broken")
        assert e[where] == pytest.approx(pick(C[..., 0]).mean())
        assert e[f"ep_cost_{where}"] == pytest.approx(pick(ep[..., 0]).mean())
    row = next(line for line in text.splitlines() if line.startswith("| A |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:4] == ["EpCost <= 5", "1"]
    assert [float(c) for c in cells[4:8]] == pytest.approx(
        [e["nominal"], e["worst"], e["ep_cost_nominal"], e["ep_cost_worst"]], abs=5e-4)
    nominal = verdict.seed_verdicts(ep[:, 0, 0, :, 0] - 5.0)
    assert cells[8] == verdict.counts_text(nominal.counts(), nominal.most_needed())
    assert e["nominal_kept"] == (False if "broken" in e["nominal_verdicts"] else
                                 None if "too close to call" in e["nominal_verdicts"] else True)
    assert cells[8].startswith(f"{e['nominal_counts']['kept']} kept, {e['nominal_counts']['broken']} broken")


def test_each_close_seed_is_named_with_its_mean_and_the_command_that_decides_it():
    # seeds x (level 0 and level 1, direction 0) x episodes of EpCost against a budget of 5
    ep = np.zeros((3, 2, 1, 4))
    ep[:, 0, 0] = [[0, 0, 0, 0], [4, 8, 2, 10], [1, 2, 1, 2]]  # seed 1 close at the nominal kernel
    ep[:, 1, 0] = [[9, 9, 9, 9], [1, 11, 3, 9], [0, 12, 1, 9]]  # worst: seed 0 broken, 1 and 2 close
    kind = verdict.Constraint("budget", gamma_c=1.0, budget=5.0)
    e = verdict.judge(ep - 5.0 * 0.5, ep, kind)  # C: any values; EpCost decides
    assert (e["worst_level_index"], e["worst_direction"]) == (1, 0)
    lines = verdict.close_calls(e, "PPO-Lag", "x>0.3", {"nominal": "nominal", "worst": "g=11.76"}, env="gymnax:X")
    assert len(lines) == 3 and [ln.split(": seed ")[1].split()[0] for ln in lines] == ["1", "1", "2"]
    for line, (where, seed) in zip(lines, [(0, 1), (1, 1), (1, 2)]):
        m, se = mean_se(ep[seed, where, 0])
        assert f"EpCost {m:.4g} ± {se:.2g}, {'above' if m > 5 else 'under'} 5" in line
        needed = math.floor(4 * (2 * se / (m - 5)) ** 2) + 1  # |m - 5| > 2 se / sqrt(n / 4)
        kernel = "nominal" if where == 0 else "g=11.76"
        assert line.endswith(f"--env 'gymnax:X' --algo 'PPO-Lag' --seed {seed} --kernel '{kernel}' --n-episodes {needed}")
    assert "at the nominal kernel" in lines[0] and "on its worst kernel" in lines[2]
    # a limit: C decides, against 0; a decided seed gives no line
    c = np.array([[[[0.5, -0.3, 0.4, -0.2]]], [[[-1.0, -1.1, -0.9, -1.0]]]])
    e = verdict.judge(c, None, verdict.Constraint("limit"))
    (line,) = verdict.close_calls(e, "A", "speed", {"nominal": "nominal", "worst": "nominal"})
    m, se = mean_se(c[0, 0, 0])
    assert f": seed 0 C {m:.4g} ± {se:.2g}, above 0" in line and "--env" not in line


def test_a_kernel_spelled_for_rcmdp_eval_reads_back_exactly():
    from rcmdp_jax.kernel_text import parse, spell

    xi_c, names = np.array([9.8, 1.0, 0.0], np.float32), ("g", "m", "xi[0,1]")
    xi = np.array([9.8 * 1.2, 1.0, -0.013], np.float32)
    text = spell(xi, xi_c, names)
    assert "m=" not in text and text.startswith("g=")
    np.testing.assert_array_equal(parse(text, xi_c, names), xi)
    assert spell(xi_c, xi_c, names) == "nominal"


def test_the_section_lists_each_close_seed_with_the_kernel_rcmdp_eval_reads():
    from rcmdp_jax.kernel_text import parse

    C = np.full((2, 2, 2, 4, 1), -5.0)
    C[0, 1, 1, :, 0] = [1.0, -1.5, 2.0, -1.0]  # seed 0 on the worst kernel: mean 0.125, too close to call
    test_xi = np.array([[[9.8, 1.0]] * 2, [[9.8 * 0.8, 1.0], [9.8 * 1.2, 1.5]]], np.float32)  # [L, D, xi]
    text, js = report.constraint_section({"A-Lag": (None, C)}, ("speed",), np.array([0.0, 1.0]), test_xi=test_xi,
                                         xi_names=("g", "m"), env_name="gymnax:X@costs=v:1")  # fmt: skip
    assert js["A-Lag"]["speed"]["worst_verdicts"] == ["too close to call", "kept"]
    (line,) = [ln for ln in text.splitlines() if ln.startswith("- ")]
    kernel = line.split("--kernel '")[1].split("'")[0]
    np.testing.assert_array_equal(parse(kernel, test_xi[0, 0], ("g", "m")), test_xi[1, 1])
    assert line.startswith("- A-Lag, speed, on its worst kernel: seed 0 C 0.125 ±")
    assert "rcmdp eval RUN_DIR --env 'gymnax:X@costs=v:1' --algo 'A-Lag' --seed 0" in line
    assert "The seeds too close to call" in text
    quiet, _ = report.constraint_section({"A-Lag": (None, np.minimum(C, -5.0))}, ("speed",), np.array([0.0, 1.0]),
                                         test_xi=test_xi, xi_names=("g", "m"))  # fmt: skip
    assert "too close to call (RUN_DIR" not in quiet and "\n- " not in quiet


def test_a_close_seed_on_the_limit_is_said_so_not_given_an_impossible_test():
    """A mean within float noise of the limit (the main job's PPO seed 8 was C 0.0066 ± 0.34: a
    million episodes "decide" it): the table, the seed's line and its verdict say it sits on the
    limit; no `rcmdp eval` of a million episodes is offered."""
    x = np.array([[0.5, -0.5, 0.51, -0.5], [0.5, -0.5, 0.7, -0.5]])  # means 0.0025 and 0.05
    v = verdict.seed_verdicts(x)
    m, se = mean_se(x[0])
    assert v.needed[0] == math.floor(4 * (2 * se / m) ** 2) + 1 > verdict.ON_THE_LIMIT >= v.needed[1]
    assert verdict.counts_text(v.counts(), v.most_needed()).endswith("(on the limit: over 10,000 episodes decide)")
    e = verdict.judge(x[:, None, None, :], None, verdict.Constraint("limit"))
    on, off = verdict.close_calls(e, "A", "speed", {"nominal": "nominal"})
    assert "on the limit" in on and "rcmdp eval" not in on and f"{v.needed[0]:,} episodes would decide" in on
    assert off.endswith(f"--n-episodes {v.needed[1]}")
    said = verdict.said_of([verdict.Constraint("limit")], [0.99], ["speed"], {"C": x[0][:, None]})
    assert said["speed"] == "too close to call (kept when C <= 0; on the limit: over 10,000 episodes decide)"
