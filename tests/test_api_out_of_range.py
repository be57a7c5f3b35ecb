"""Values out of range through the API: a family member outside the family under vmap, an
infinite kappa, bad actions under jit in the gymnax wrapper and outside it on CartPole: flagged
per lane when traced, refused by name when not."""


import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny


# ------------------------------------------------------------------ 5. the API's gaps
def test_a_family_member_outside_the_family_is_flagged_per_lane_under_vmap():
    import jax

    from rcmdp_jax import make_family
    from rcmdp_jax.divergence import diverged_seeds
    from rcmdp_jax.train import TrainResult

    cfgs = [tiny(algo=a, iterations=1) for a in ("MDPO", "MDPO-Lag")]
    fam = make_family(cfgs)
    with pytest.raises(ValueError, match="member must index the family's 2 config"):
        fam(jax.random.PRNGKey(0), np.array([1, 7]))
    members = np.array([1, 7, 0])
    res = jax.jit(jax.vmap(fam))(jax.random.split(jax.random.PRNGKey(0), 3), members)
    valid = np.asarray(res.metrics["valid_input"]).reshape(3, -1)
    assert valid[0].all() and not valid[1].any() and valid[2].all()
    np.testing.assert_array_equal(diverged_seeds(TrainResult(res.state, res.metrics)), [False, True, False])


@pytest.mark.parametrize("start,n,match", [
    (0, -1, "n must be a whole number"), (0, 0, "n must be a whole number"), (0, 1.5, "n must be"), (0, True, "n must be"),
    (-2, 1, r"iterations -2..-2 are outside this program's 0..0"), (0, 2, r"iterations 0..1 are outside"),
    (1, 1, "outside"), (np.uint64(2**63), 1, "outside"), (1.5, 1, "start must be one integer"),
    ("1", 1, "start must be one integer"), (None, 1, "start must be one integer"), (True, 1, "start must be one"),
    (jnp.array([0, 0]), 1, "start must be one integer"), (jnp.array(0.0), 1, "start must be one integer"),
])  # fmt: skip
def test_run_names_a_chunk_that_is_not_one(start, n, match):
    from rcmdp_jax import make_train

    train = make_train(tiny(algo="MDPO", iterations=1))
    with pytest.raises(ValueError, match=match):
        train.run(None, None, start, n)  # refused before the state is looked at


def test_an_infinite_kappa_is_refused_and_flagged_when_traced():
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs, make_train

    env, params = envs.make("cartpole")
    inf = params.replace(kappa=jnp.array([np.inf, 0.05, 0.005, 0.05]))
    with pytest.raises(ValueError, match="kappa must be finite"):
        env.validate_params(inf)
    cfg = tiny(algo="MDPO", iterations=1)
    with pytest.raises(ValueError, match="kappa must be finite"):
        make_train(cfg)(jax.random.PRNGKey(0), None, inf)
    assert not bool(jax.jit(env.kernel_ok)(inf)) and bool(jax.jit(env.kernel_ok)(params))


@pytest.mark.parametrize("name,action", [("gymnax:CartPole-v1", 7), ("gymnax:CartPole-v1", -1),
                                         ("gymnax:Pendulum-v1", [np.nan]), ("gymnax:Acrobot-v1", 3)])  # fmt: skip
def test_the_gymnax_wrapper_under_jit_makes_a_bad_action_nan_and_ends_the_episode(name, action):
    import jax
    import jax.numpy as jnp

    from rcmdp_jax import envs

    env, params = envs.make(name)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    good = jnp.zeros((), jnp.int32) if env.discrete else jnp.zeros((env.action_dim,), jnp.float32)
    step = jax.jit(env.step_env)
    _, s, r, done, info = step(jax.random.PRNGKey(1), state, good, params)
    assert np.isfinite(r) and np.all(np.isfinite(s.s)) and not done
    bad = jnp.asarray(action, good.dtype)
    _, s, r, done, info = step(jax.random.PRNGKey(1), state, bad, params)
    assert np.isnan(r) and np.all(np.isnan(s.s)) and np.all(np.isnan(info["costs"])) and bool(done)


@pytest.mark.parametrize("action", ["1", None, True, 7, np.nan])
def test_cartpole_step_names_an_action_that_is_not_one(action):
    import jax

    from rcmdp_jax import envs

    env, params = envs.make("cartpole")
    _, state = env.reset(jax.random.PRNGKey(0), params)
    with pytest.raises(ValueError, match=r"RobustCartPole: action .* is not in the action space; expected an integer"):
        env.step(jax.random.PRNGKey(1), state, action, params)


# ------------------------------------------------------------------ 6. the lock


