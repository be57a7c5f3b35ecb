"""The feasibility check (rcmdp_jax.feasibility) against a toy whose least constraint value is
known in closed form, the cost-minimising signal by hand, a user's controller as witness, and
the report's verdicts. One training per box (a tiny PPO program), shared by the tests."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from feasibility_toy import DISCOUNT, Drift  # tests/ is on the path (pytest's rootdir-relative import)

from rcmdp_jax import envs
from rcmdp_jax.feasibility import FeasibilityConfig, best_policy_ep_cost, check_feasibility
from rcmdp_jax.feasibility_report import lines, mean_and_se, summarise
from rcmdp_jax.worst_case import SearchConfig

SMALL = dict(policy_hidden=(16,), critic_hidden=(16,), hp={"lr": 3e-3})


@pytest.fixture(scope="module")
def wide():
    """The box xi in [-0.3, 1.3]: not keepable above xi = 1 (levels 0.8, 0.9, 1 of the + direction)."""
    envs.register("drift-wide", Drift(0.8), learner=SMALL, n_test=8)
    cfg = FeasibilityConfig(seeds=2, steps=4800, search=SearchConfig(steps=4, episodes=4, eval_episodes=16))
    return check_feasibility("drift-wide", cfg, controller=lambda obs: jnp.int32(1))


def test_cost_minimising_reward_is_minus_the_cost_by_hand():
    env, params = envs.make("cartpole")
    own = envs.cost_minimising(env, 0)
    key = jax.random.PRNGKey(3)
    _, state = env.reset(key, params)
    state = state.replace(s=jnp.array([0.1, -0.4, 0.02, 0.3]))
    _, s1, r1, _, info = env.step_env(key, state, 1, params)
    _, s2, r2, _, info2 = own.step_env(key, state, 1, params)
    assert float(r1) == 1.0  # CartPole's own reward is untouched
    assert np.isclose(float(r2), -(abs(-0.4) - 0.15))  # c = |x_dot| - 0.15 of the state stepped from
    assert np.array_equal(np.asarray(s1.s), np.asarray(s2.s)) and np.array_equal(info["costs"], info2["costs"])
    with pytest.raises(ValueError, match="constraint index in 0 .. 0"):
        envs.cost_minimising(env, 1)


def test_wide_box_is_not_keepable_and_names_where_it_breaks(wide):
    (r,) = wide["constraints"]
    assert not r["keepable"]
    broken = sorted((k["level"], k["direction"]) for k in r["not_keepable_kernels"] if k["level"] is not None)
    # xi = 0.5 + level^2 * 0.8 > 1  <=>  level^2 > 0.625: levels 0.8, 0.9, 1 in the + direction (index 1)
    assert broken == [(0.8, 1), (0.9, 1), (1.0, 1)]
    assert r["keepable_up_to_level"] == pytest.approx(0.7)
    assert r["worst_kernel"]["kernel"]["xi[0]"] == pytest.approx(1.3)
    assert r["worst_kernel"]["described"] == "xi[0] +160 %"
    # the closed form on the worst kernel: (1.3 - 1) * DISCOUNT
    assert r["least_worst_C"] == pytest.approx(0.3 * DISCOUNT, abs=0.05)
    text = "\n".join(lines(wide))
    assert "one policy for the whole box: NOT keepable" in text
    assert "kernel by kernel (each kernel's best policy found): C <= 0 met on every test kernel up to level 0.7" in text
    assert "kernel by kernel: 3 of 22 test kernels where no policy found meets C <= 0" in text


def test_settings_and_standard_errors_against_the_closed_form(wide):
    (r,) = wide["constraints"]
    s = wide["settings"]
    assert (s["gamma"], s["horizon"], s["n_test"], s["steps"]) == (pytest.approx(0.9), 10, 8, 4800)
    assert "settings: gamma 0.9, H 10 steps, n_test 8 episodes per test kernel" in lines(wide)[0]
    # a = 1 every step: c_t ~ N(xi - 1, 0.01^2) independently, so C's std is 0.01 sqrt(sum gamma^2t)
    # and the 8-episode mean's standard error that over sqrt(8) (a sample estimate: within a factor 2)
    exact = 0.01 * np.sqrt(sum(0.81**t for t in range(10))) / np.sqrt(8)
    assert 0.5 * exact < r["least_worst_C_se"] < 2 * exact
    assert np.all((0.5 * exact < np.array(r["least_C_se"])) & (np.array(r["least_C_se"]) < 2 * exact))
    assert not r["too_close_to_call"]  # 0.27 above the limit, the error ~0.005


def test_the_best_policys_episode_cost_only_for_a_budget(wide):
    """EpCost, the count of unsafe steps, is said for a budget of them; the toy's cost is continuous
    (c_t ~ xi - 1), whose undiscounted sum means nothing against its limit: not said, and C is
    written with its discount (0.9), never as 1^t."""
    (r,) = wide["constraints"]
    assert r["kind"] == "limit" and "learned_ep_cost" not in r
    text = "\n".join(lines(wide))
    assert "EpCost" not in text and "C = E[sum_t 0.9^t c_t]" in text
    budget = dict(r, kind="budget", budget=5.0, gamma_c=1.0, learned_ep_cost={"nominal": 3.0, "worst_kernel": 7.5})
    text = "\n".join(lines({"settings": wide["settings"], "constraints": [budget]}))
    assert "EpCost (unsafe steps per episode, budget 5) 3 at the nominal kernel, 7.5 on its worst" in text
    assert "C = E[sum_t c_t]" in text
    C = np.array([[[0.0, 2.0]], [[1.0, 1.5]]])  # policy 1's worst C (1.5) is the least
    ep = np.array([[[10.0, 20.0]], [[30.0, 40.0]]])
    assert best_policy_ep_cost(C, ep) == {"nominal": 30.0, "worst_kernel": 40.0}


def test_standard_errors_by_hand_and_a_verdict_too_close_to_call():
    rng = np.random.default_rng(5)
    episodes = rng.normal(-0.2, 1.0, size=(3, 2, 2, 20))  # [seed, level, direction, episode]
    episodes[1] -= 0.5  # seed 1 the best everywhere
    mean, se = mean_and_se(episodes)
    by_hand = np.sqrt(((episodes - episodes.mean(-1, keepdims=True)) ** 2).sum(-1) / 19 / 20)
    np.testing.assert_allclose(se, by_hand)
    np.testing.assert_allclose(mean, episodes.sum(-1) / 20)
    grid_xi = np.array([[[1.0], [1.0]], [[0.5], [1.5]]])
    r = summarise(mean, [0.0, 1.0], grid_xi, np.array([1.0]), ("g",), "c", se=se)
    worst = np.unravel_index(np.argmax(mean[1]), mean[1].shape)
    assert r["least_worst_C"] == pytest.approx(mean[1][worst])
    assert r["least_worst_C_se"] == pytest.approx(by_hand[1][worst])
    best = mean.argmin(0)  # each kernel's best policy, and the standard error of its mean there
    least, least_se = (np.take_along_axis(x, best[None], 0)[0] for x in (mean, by_hand))
    np.testing.assert_allclose(r["least_C_se"], least_se)
    np.testing.assert_allclose(r["least_C_per_level_se"], [least_se[i][np.argmax(least[i])] for i in range(2)])
    np.testing.assert_allclose(r["learned_worst_C_se_per_seed"],
                               [by_hand[s].flat[np.argmax(mean[s])] for s in range(3)])  # fmt: skip
    assert r["worst_kernel"]["least_C_se"] == pytest.approx(least_se.flat[np.argmax(least)])
    # within two standard errors of the limit: said, with a tenfold n_test to try
    close = summarise(np.full((1, 2, 2), 0.05), [0.0, 1.0], grid_xi, np.array([1.0]), ("g",), "c",
                      se=np.full((1, 2, 2), 0.1))  # fmt: skip
    assert close["too_close_to_call"] and not close["keepable"] and close["close_kernels"] == 4
    text = "\n".join(lines({"constraints": [close], "settings": {"gamma": 0.9, "horizon": 10, "n_test": 20}}))
    assert "too close to call at n_test = 20" in text and "try --n-test 200" in text
    assert "least worst-kernel C = +0.05 ± 0.1" in text
    far = summarise(np.full((1, 2, 2), 0.5), [0.0, 1.0], grid_xi, np.array([1.0]), ("g",), "c",
                    se=np.full((1, 2, 2), 0.1))  # fmt: skip
    assert not far["too_close_to_call"] and "too close" not in "\n".join(lines({"constraints": [far]}))


def test_each_line_says_which_notion_it_speaks_of():
    levels, grid_xi = [0.0, 1.0], np.array([[[1.0], [1.0]], [[0.5], [1.5]]])
    # two policies, each breaking a kernel the other keeps: no one policy, but every kernel keepable
    C = np.array([[[-1.0, -1.0], [0.4, -1.0]], [[-1.0, -1.0], [-1.0, 0.4]]])
    r = summarise(C, levels, grid_xi, np.array([1.0]), ("g",), "c")
    text = "\n".join(lines({"constraints": [r]}))
    assert not r["keepable"] and r["keepable_up_to_level"] == 1.0 and r["not_keepable_kernels"] == []
    assert "one policy for the whole box: NOT keepable" in text
    assert "kernel by kernel (each kernel's best policy found): C <= 0 met on every test kernel up to level 1" in text
    assert "kernel by kernel: 0 of 4 test kernels where no policy found meets C <= 0" in text
    # a margin: the line names the bound it asks for, not "it breaks"
    r = summarise(np.full((2, 2, 2), -0.5), levels, grid_xi, np.array([1.0]), ("g",), "c", margin=1.0)
    text = "\n".join(lines({"constraints": [r]}))
    assert "C <= -1 (margin 1) not met even at the nominal kernel" in text and "breaks" not in text
    assert "c (C <= -1 (margin 1) wanted):" in text


@pytest.mark.parametrize(
    "a, b",
    [
        ("cartpole@velocity_limit=0.2", "cartpole@velocity_limit=1.5"),
        ("gymnax:CartPole-v1@costs=x>0.3:5", "gymnax:CartPole-v1@costs=x>0.05:10"),
    ],
)
def test_the_cannot_bind_check_at_another_limit_is_the_same_program(a, b):
    """The check's episodes take the environment's parameters as an argument: at another limit
    (a study domain's ``@FIELD=X``, a ``--costs`` limit and budget) it lowers to the same program,
    which JAX's compilation cache then holds once (a rerun that changes the limit compiles no check),
    and the limit still reaches it: the costs differ."""
    from rcmdp_jax import cost_check

    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    (env_a, p_a), (env_b, p_b) = envs.make(a), envs.make(b)
    lowered = [
        jax.jit(cost_check.episodes_program(e)).lower(keys, p).as_text() for e, p in ((env_a, p_a), (env_b, p_b))
    ]
    assert lowered[0] == lowered[1]
    costs_a, costs_b = cost_check.step_costs(a, episodes=2), cost_check.step_costs(b, episodes=2)
    assert costs_a.shape == costs_b.shape and not np.array_equal(costs_a, costs_b)


def test_a_cost_that_never_moves_is_warned_of_and_a_moving_one_is_not():
    from feasibility_toy import Fixed

    from rcmdp_jax import cost_check

    envs.register("drift-fixed", Fixed(0.8), learner=SMALL, n_test=2)
    envs.register("drift-moving", Drift(0.8), learner=SMALL, n_test=2)
    costs = cost_check.step_costs("drift-moving", episodes=3)
    assert costs.shape == (3, 10, 1) and np.ptp(costs) > 0.5  # s' = xi - a + noise, a random in {0, 1}
    assert cost_check.cannot_bind("drift-moving") == []
    (line,) = cost_check.cannot_bind("drift-fixed")
    assert "constraint 'C_1' cannot bind" in line and "+0.25 on every step" in line
    assert cost_check.constant(np.array([[[1.0, 2.0]], [[1.0, np.nan]], [[1.0, 3.0]]])) == [(0, 1.0)]
    # check_feasibility says it before it trains (the progress line that starts training stops it here)
    said = []

    def progress(msg):
        said.append(msg)
        if "training" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_feasibility("drift-fixed", FeasibilityConfig(seeds=1, steps=160, search=None), progress=progress)
    assert said[0] == f"warning: {line}" and "training" in said[1]
    with pytest.warns(cost_check.CannotBindWarning, match="cannot bind"):
        cost_check.warn("drift-fixed")


def test_the_runner_warns_of_a_cost_that_never_moves_before_training(tmp_path, monkeypatch, capsys):
    from rcmdp_jax.study import cli, orchestrate

    class NoStudy:  # what is printed before training is checked: nothing trains
        def __init__(self, *args):
            pass

        def run(self):
            print("training starts")
            return 0

    monkeypatch.setattr(orchestrate, "Study", NoStudy)
    toy = Path(__file__).parent / "feasibility_toy.py"
    for make, warned in (("make_fixed", True), ("make", False)):
        argv = ["--env", f"{toy}:{make}", "--algos", "PPO-Lag", "--seeds", "1", "--out", str(tmp_path / make)]
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        assert ("rcmdp_jax: warning: " in out and "cannot bind" in out) == warned, out
        assert not warned or out.index("cannot bind") < out.index("training starts")


def test_learned_policies_reach_the_closed_form_on_every_kernel(wide):
    (r,) = wide["constraints"]
    xi = 0.5 + np.asarray(wide["levels"])[:, None] ** 2 * 0.8 * np.array([-1.0, 1.0])
    assert np.allclose(r["least_C"], (xi - 1) * DISCOUNT, atol=0.05)
    assert min(r["learned_worst_C_per_seed"]) == pytest.approx(0.3 * DISCOUNT, abs=0.05)


def test_a_controller_is_a_second_witness(wide):
    (r,) = wide["constraints"]
    assert wide["controller"] and r["witness_worst_C"] == pytest.approx(0.3 * DISCOUNT, abs=0.02)
    exact = 0.01 * np.sqrt(sum(0.81**t for t in range(10))) / np.sqrt(8)  # a = 1 always, as the learned ones
    assert 0.5 * exact < r["witness_worst_C_se"] < 2 * exact
    # the gradient search ran on the best learned policy and found no kernel worse than the box's edge
    assert r["search"] is not None and r["search"]["C"] <= 0.3 * DISCOUNT + 0.05


def test_narrow_box_is_keepable():
    envs.register("drift-narrow", Drift(0.3), learner=SMALL, n_test=8)
    report = check_feasibility("drift-narrow", FeasibilityConfig(seeds=2, steps=4800, search=None))
    (r,) = report["constraints"]
    assert r["keepable"] and r["not_keepable_kernels"] == [] and r["keepable_up_to_level"] == 1.0
    assert r["least_worst_C"] == pytest.approx((0.8 - 1) * DISCOUNT, abs=0.05)


def test_report_takes_the_better_witness_and_the_search_beyond_the_grid():
    levels = np.array([0.0, 1.0])
    grid_xi = np.array([[[1.0], [1.0]], [[0.0], [2.0]]])
    C = np.array([[[-1.0, -1.0], [-2.0, 0.5]], [[-1.0, -1.0], [-2.0, 2.0]]])  # 2 seeds; seed 0 is the better
    r = summarise(C, levels, grid_xi, np.array([1.0]), ("g",), "c")
    assert not r["keepable"] and r["least_worst_C"] == 0.5 and "seed 0" in r["least_worst_C_by"]
    assert r["worst_kernel"]["described"] == "g +100 %" and r["keepable_up_to_level"] == 0.0
    witness = np.array([[-1.0, -1.0], [-0.5, -0.1]])
    r = summarise(C, levels, grid_xi, np.array([1.0]), ("g",), "c", witness=witness)
    assert r["keepable"] and r["least_worst_C"] == -0.1 and r["least_worst_C_by"] == "witness"
    r = summarise(C, levels, grid_xi, np.array([1.0]), ("g",), "c", search={"C": 0.9, "xi": np.array([1.7])})
    assert r["least_worst_C"] == 0.9 and r["not_keepable_kernels"][-1]["kernel"] == {"g": 1.7}
    r = summarise(C, levels, grid_xi, np.array([1.0]), ("g",), "c", margin=1.5)
    assert not r["keepable"] and r["keepable_up_to_level"] is None


def test_bad_settings_are_refused_before_training():
    for bad, match in [(dict(seeds=0), "seeds"), (dict(learner="sac"), "learner"), (dict(margin=-1.0), "margin"),
                       (dict(method="best"), "method")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            check_feasibility("cartpole", FeasibilityConfig(**bad))
    with pytest.raises(ValueError, match="controller"):
        check_feasibility("cartpole", controller=lambda obs: jnp.zeros((3,)))


def test_command_writes_feasibility_json_and_never_overwrites_it(tmp_path, capsys):
    from rcmdp_jax.study.console import main

    toy = Path(__file__).parent / "feasibility_toy.py"
    argv = ["feasibility", "--env", f"{toy}:make", "--seeds", "2", "--steps", "4800", "--no-search",
            "--out", str(tmp_path / "f")]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((tmp_path / "f" / "feasibility.json").read_text())
    (r,) = report["constraints"]
    assert r["keepable"] is False and r["least_worst_C"] > 0 and r["not_keepable_kernels"]
    assert {"level", "direction", "kernel", "described", "least_C"} <= set(r["not_keepable_kernels"][0])
    assert (tmp_path / "f" / "feasibility.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "NOT keepable" in out and "feasibility.json" in out and "n_test 2 episodes per test kernel" in out
    before = (tmp_path / "f" / "feasibility.json").read_bytes()
    assert main(argv) == 2 and "already exists" in capsys.readouterr().err
    assert (tmp_path / "f" / "feasibility.json").read_bytes() == before
    assert main(["feasibility", "--env", "gymnax:MountainCar-v0", "--uncertain", "gravity=0.1"]) == 2
    assert "no constraint costs" in capsys.readouterr().err
