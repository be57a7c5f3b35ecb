"""Costs in the safe-RL field's terms (envs.indicator, --costs 'FIELD>LIMIT:BUDGET'): 1 per
unsafe step, less the per-step share B/H of a budget of B unsafe steps per H-step episode, by hand."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from rcmdp_jax.envs.unsafe_steps import budget_per_step

from rcmdp_jax import envs


def test_a_steady_rate_of_unsafe_steps_within_the_budget_is_kept():
    # unsafe on k of every H steps at a steady rate: C = sum_t gamma^t (1[unsafe_t] - B/H) <= 0 iff k <= B
    gamma, length, budget = 0.99, 200, 10.0
    b = budget_per_step(budget, length)
    assert b == budget / length
    disc = gamma ** np.arange(length)
    for every, kept in [(20, True), (10, False)]:  # 10 unsafe steps (every 20th) kept, 20 (every 10th) not
        unsafe = (np.arange(length) % every == every - 1).astype(float)
        c = np.sum(disc * (unsafe - b))
        assert (c <= 1e-9) == kept, (every, c)


def _step_cost(env, params, velocity: float):
    """The cost of one step of MountainCar-v0 whose next state has the given velocity."""
    cost_fn = env.cost_fns[0]
    nxt = env.inner.reset(jax.random.PRNGKey(1), env.inner_params)[1].replace(velocity=jnp.float32(velocity))
    return float(cost_fn(nxt, 0, nxt, env.inner_params)[0])


def test_command_line_indicator_with_a_budget_by_hand():
    name = envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.04:5")
    env, params = envs.make(name)
    spec = envs.spec(name)
    assert spec.cost_names == ("|velocity|>0.04 at most 5/episode",)
    b = 5.0 / env.episode_length  # 5 unsafe steps an episode: a share of 5/H
    assert _step_cost(env, params, 0.05) == pytest.approx(1.0 - b, rel=1e-5)  # unsafe
    assert _step_cost(env, params, -0.05) == pytest.approx(1.0 - b, rel=1e-5)  # |v| over the limit either way
    assert _step_cost(env, params, 0.03) == pytest.approx(-b, rel=1e-5)  # safe: the budget's share of slack
    no_budget, _ = envs.make(envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.04"))
    assert _step_cost(no_budget, params, 0.05) == 1.0 and _step_cost(no_budget, params, 0.0) == 0.0


def test_robustify_takes_an_indicator_and_refuses_a_bad_budget():
    inner, _ = gymnax.make("MountainCar-v0")
    fast = envs.indicator(lambda s, a, n, p: jnp.abs(n.velocity) > 0.04, budget=2.0)
    env = envs.robustify(inner, {"gravity": 0.1}, {"fast": fast}, gamma=0.9)
    b = 2.0 / env.episode_length
    assert _step_cost(env, env.default_params, 0.05) == pytest.approx(1.0 - b, rel=1e-5)
    with pytest.raises(ValueError, match="budget"):
        envs.indicator(lambda s, a, n, p: n.velocity > 0, budget=-1.0)
    with pytest.raises(ValueError, match="budget"):
        envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.04:-2")
