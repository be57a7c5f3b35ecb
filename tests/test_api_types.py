"""The Python API refuses values of the wrong kind with a TypeError or ValueError that
names what it expects, before anything is traced; NumPy integers are integers."""

import json

import jax
import numpy as np
import pytest

from rcmdp_jax import make_family, make_train, preset
from rcmdp_jax.config import config_to_dict


@pytest.mark.parametrize("config", [{"env": "cartpole"}, None, "cartpole"])
def test_make_train_names_the_config_it_needs(config):
    with pytest.raises(TypeError, match="make_train needs an rcmdp_jax.Config"):
        make_train(config)


def test_env_params_must_be_the_environments_params():
    train = make_train(preset("cartpole", "PPO", total_timesteps=64, n_steps=16, minibatch_size=16))
    with pytest.raises(TypeError, match="env_params must be the environment's CartPoleParams"):
        train.init(jax.random.PRNGKey(0), env_params={"xi": [1.0, 1.0, 1.0, 1.0]})


def test_numpy_integers_are_integers_and_the_config_stays_json_ready():
    cfg = preset("cartpole", "MDPO", epochs=np.int64(2), n_envs=np.int32(2), policy_hidden=(np.int64(8),))
    assert (cfg.epochs, cfg.n_envs, cfg.policy_hidden) == (2, 2, (8,))
    assert type(cfg.epochs) is int and type(cfg.policy_hidden[0]) is int
    json.dumps(config_to_dict(cfg))
    hash(cfg)


@pytest.mark.parametrize("member", [5, -1, np.array([0, 1])])
def test_a_family_member_index_outside_the_family_is_refused(member):
    family = make_family([preset("cartpole", "MDPO", total_timesteps=64, n_steps=16, minibatch_size=16)])
    with pytest.raises(ValueError, match=r"member must index the family's 1 config\(s\) \(0 .. 0\)"):
        family.init(jax.random.PRNGKey(0), member)


def test_vmapped_values_out_of_range_are_flagged_per_lane():
    """Under ``jax.vmap`` the hyperparameters and the kernel are traced: the program flags
    each lane whose values are out of range (``valid_input``), and the divergence check
    leaves it out; concrete batched values are refused before tracing. One program, five
    lanes: valid, gamma out of range, lr NaN, xi outside the box, xi NaN (one fault a lane)."""
    import jax.numpy as jnp

    from rcmdp_jax.divergence import diverged_seeds

    cfg = preset("cartpole", "MDPO-Lag", total_timesteps=64, n_steps=16, minibatch_size=16, epochs=1, eval_every=100)
    train = make_train(cfg)
    hp, params = cfg.hparams, train.step.default_env_params
    lanes = jax.tree.map(lambda x: jnp.full((5,), x, jnp.float32), hp)
    lanes = lanes.replace(gamma=lanes.gamma.at[1].set(2.0), lr=lanes.lr.at[2].set(jnp.nan))
    xi = jnp.stack([params.xi, params.xi, params.xi, params.xi * 1e6, params.xi * jnp.nan])
    kernels = jax.tree.map(lambda x: jnp.broadcast_to(x, (5,) + jnp.shape(x)), params).replace(xi=xi)
    result = jax.jit(jax.vmap(lambda h, k: train(jax.random.PRNGKey(0), h, k)))(lanes, kernels)
    np.testing.assert_array_equal(np.asarray(result.metrics["valid_input"])[:, 0], [1.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(diverged_seeds(result), [False, True, True, True, True])
    with pytest.raises(ValueError, match="gamma must be in \\[0, 1\\]"):
        train(jax.random.PRNGKey(0), hp.replace(gamma=np.array([0.99, 2.0])))  # concrete: before tracing
