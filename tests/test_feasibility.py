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
from rcmdp_jax.feasibility import FeasibilityConfig, check_feasibility
from rcmdp_jax.feasibility_report import lines, summarise
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
    assert "NOT keepable" in text and "up to level 0.7" in text and "no policy found keeps it" in text


def test_learned_policies_reach_the_closed_form_on_every_kernel(wide):
    (r,) = wide["constraints"]
    xi = 0.5 + np.asarray(wide["levels"])[:, None] ** 2 * 0.8 * np.array([-1.0, 1.0])
    assert np.allclose(r["least_C"], (xi - 1) * DISCOUNT, atol=0.05)
    assert min(r["learned_worst_C_per_seed"]) == pytest.approx(0.3 * DISCOUNT, abs=0.05)


def test_a_controller_is_a_second_witness(wide):
    (r,) = wide["constraints"]
    assert wide["controller"] and r["witness_worst_C"] == pytest.approx(0.3 * DISCOUNT, abs=0.02)
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
    assert "NOT keepable" in out and "feasibility.json" in out
    before = (tmp_path / "f" / "feasibility.json").read_bytes()
    assert main(argv) == 2 and "already exists" in capsys.readouterr().err
    assert (tmp_path / "f" / "feasibility.json").read_bytes() == before
    assert main(["feasibility", "--env", "gymnax:MountainCar-v0", "--uncertain", "gravity=0.1"]) == 2
    assert "no constraint costs" in capsys.readouterr().err
