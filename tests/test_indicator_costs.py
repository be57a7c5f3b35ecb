"""Costs in the safe-RL field's terms (envs.indicator, --costs 'FIELD>LIMIT:BUDGET'): 1 per
unsafe step, less the per-step share of a budget of unsafe steps per episode, by hand."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rcmdp_jax import envs
from rcmdp_jax.envs.unsafe_steps import budget_per_step


def test_the_budget_share_sums_to_the_budget_over_an_episode():
    for gamma, length, budget in [(0.9, 10, 2.0), (0.99, 200, 5.0), (1.0, 50, 3.0)]:
        b = budget_per_step(budget, gamma, length)
        assert np.sum(b * gamma ** np.arange(length)) == pytest.approx(budget)


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
    gamma, length = env.gamma, env.episode_length
    b = 5.0 * (1 - gamma) / (1 - gamma**length)  # sum_t gamma^t b = 5 over a full episode
    assert _step_cost(env, params, 0.05) == pytest.approx(1.0 - b, rel=1e-5)  # unsafe
    assert _step_cost(env, params, -0.05) == pytest.approx(1.0 - b, rel=1e-5)  # |v| over the limit either way
    assert _step_cost(env, params, 0.03) == pytest.approx(-b, rel=1e-5)  # safe: the budget's share of slack
    no_budget, _ = envs.make(envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.04"))
    assert _step_cost(no_budget, params, 0.05) == 1.0 and _step_cost(no_budget, params, 0.0) == 0.0


def test_robustify_takes_an_indicator_and_refuses_a_bad_budget():
    inner, _ = gymnax.make("MountainCar-v0")
    fast = envs.indicator(lambda s, a, n, p: jnp.abs(n.velocity) > 0.04, budget=2.0)
    env = envs.robustify(inner, {"gravity": 0.1}, {"fast": fast}, gamma=0.9)
    b = 2.0 * 0.1 / (1 - 0.9 ** env.episode_length)
    assert _step_cost(env, env.default_params, 0.05) == pytest.approx(1.0 - b, rel=1e-5)
    with pytest.raises(ValueError, match="budget"):
        envs.indicator(lambda s, a, n, p: n.velocity > 0, budget=-1.0)
    with pytest.raises(ValueError, match="budget"):
        envs.gymnax_name("gymnax:MountainCar-v0", "gravity=0.1", "velocity>0.04:-2")
