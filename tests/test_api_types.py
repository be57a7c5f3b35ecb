"""The Python API refuses values of the wrong kind with a TypeError or ValueError that
names what it expects, before anything is traced (make_train, make_family, make_eval and its
sweep, check_feasibility, robustify's costs, a robust method's registration); NumPy integers
are integers."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_configs import tiny

from rcmdp_jax import envs, make_family, make_train, preset
from rcmdp_jax.config import config_to_dict


@pytest.mark.parametrize("config", [{"env": "cartpole"}, None, "cartpole"])
def test_make_train_names_the_config_it_needs(config):
    with pytest.raises(TypeError, match="make_train needs an rcmdp_jax.Config"):
        make_train(config)


def test_env_params_must_be_the_environments_params():
    train = make_train(tiny(algo="PPO", iterations=1))
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
    family = make_family([tiny(algo="MDPO", iterations=1)])
    with pytest.raises(ValueError, match=r"member must index the family's 1 config\(s\) \(0 .. 0\)"):
        family.init(jax.random.PRNGKey(0), member)


def test_vmapped_values_out_of_range_are_flagged_per_lane():
    """Under ``jax.vmap`` the hyperparameters and the kernel are traced: the program flags
    each lane whose values are out of range (``valid_input``), and the divergence check
    leaves it out; concrete batched values are refused before tracing. One program, five
    lanes: valid, gamma out of range, lr NaN, xi outside the box, xi NaN (one fault a lane)."""
    import jax.numpy as jnp

    from rcmdp_jax.divergence import diverged_seeds

    cfg = tiny(algo="MDPO-Lag", iterations=1)
    train = make_train(cfg)
    hp, params = cfg.hparams, train.step.default_env_params
    lanes = jax.tree.map(lambda x: jnp.full((5,), x, jnp.float32), hp)
    lanes = lanes.replace(gamma=lanes.gamma.at[1].set(2.0), lr=lanes.lr.at[2].set(jnp.nan))
    xi = jnp.stack([params.xi, params.xi, params.xi, params.xi * 1e6, params.xi * jnp.nan])
    kernels = jax.tree.map(lambda x: jnp.broadcast_to(x, (5,) + jnp.shape(x)), params).replace(xi=xi)
    result = jax.jit(jax.vmap(lambda h, k: train(jax.random.PRNGKey(0), h, k)))(lanes, kernels)
    np.testing.assert_array_equal(np.asarray(result.metrics["valid_input"])[:, 0], [1.0, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(diverged_seeds(result), [False, True, True, True, True])
    with pytest.raises(ValueError, match="gamma must be a number in \\[0, 1\\]"):
        train(jax.random.PRNGKey(0), hp.replace(gamma=np.array([0.99, 2.0])))  # concrete: before tracing


# ------------------------------------------------------------------ values the API refuses by name
def test_make_eval_takes_a_whole_number_of_episodes_within_int32():
    from rcmdp_jax.evaluate import make_eval

    cfg = preset("cartpole", "PPO")
    for bad in (2.5, 0, True, "3"):
        with pytest.raises(ValueError, match=f"n_test must be a positive integer, got {bad!r}"):
            make_eval(cfg, n_test=bad)
    # 11 levels x 16 directions = 176 kernels; 2**31 - 1 episodes // 176 = 12,201,611 at most
    with pytest.raises(ValueError, match="176,000,000,000,000 test episodes per seed .* at most 12,201,611"):
        make_eval(cfg, n_test=10**12)
    assert make_eval(cfg, n_test=12_201_611).n_test == 12_201_611


def test_make_family_names_what_it_needs():
    with pytest.raises(TypeError, match=r"make_family needs a list of rcmdp_jax.Config .* got \['int', 'int'\]"):
        make_family([1, 2])
    with pytest.raises(TypeError, match="got Config"):
        make_family(preset("cartpole", "PPO"))


def test_a_robust_method_without_step_is_refused_at_registration():
    from rcmdp_jax import adversary
    from rcmdp_jax.adversary.base import Adversary

    class Idle(Adversary):
        per_env = True

    with pytest.raises(ValueError, match=r"robust method 'idle': Idle does not define step\(self, ctx, key"):
        adversary.register("idle", Idle)
    assert "idle" not in adversary.names()


@pytest.mark.parametrize(
    "costs,error,match",
    [
        (
            {"c": 3},
            TypeError,
            r"costs\['c'\] must be a function c\(state, action, next_state, params\) -> a \(k,\) "
            "array, got int 3",
        ),
        (
            {"speed": lambda s, a, n, p: jnp.abs(n.theta_dot) - 1.5},
            ValueError,
            r"costs\['speed'\] returns shape \(\); a cost returns a vector of shape \(k,\)",
        ),
        ({"grid": lambda s, a, n, p: jnp.zeros((2, 2))}, ValueError, r"costs\['grid'\] returns shape \(2, 2\)"),
    ],
)
def test_robustify_names_a_cost_that_is_not_a_vector_function(costs, error, match):
    import gymnax

    with pytest.raises(error, match=match):
        envs.robustify(gymnax.make("Pendulum-v1")[0], {"m": 0.2}, costs)


# ------------------------------------------------------------------ the wrong type through the evaluation, feasibility and training calls
def _api_cases():
    from rcmdp_jax import make_train
    from rcmdp_jax.evaluate import make_eval
    from rcmdp_jax.feasibility import FeasibilityConfig, check_feasibility

    cfg = tiny(algo="PPO", iterations=1)
    key = jax.random.PRNGKey(0)
    return {
        "make_eval(str)": (lambda: make_eval("cartpole", n_test=2), TypeError, "make_eval needs an rcmdp_jax.Config"),
        "make_eval env_params": (lambda: make_eval(cfg, n_test=2, env_params="x"), TypeError, "CartPoleParams"),
        "sweep(str)": (lambda: make_eval(cfg, 1)("actor", key), TypeError, "actor_params must be"),
        "sweep(no leaves)": (lambda: make_eval(cfg, 1)({"params": {}}, key), TypeError, "actor_params must be"),
        "sweep key": (lambda: make_eval(cfg, 1)({"w": jax.numpy.zeros((1, 2))}, "k"), TypeError, "JAX random key"),
        "check_feasibility(123)": (lambda: check_feasibility(123), TypeError, "name must be an environment name"),
        "check_feasibility(None)": (lambda: check_feasibility(None), TypeError, "name must be an environment name"),
        "config='x'": (lambda: check_feasibility("cartpole", config="x"), TypeError, "config must be a Feasibility"),
        "search='x'": (lambda: check_feasibility("cartpole", FeasibilityConfig(search="x")), TypeError, "SearchConfig"),
        "progress='x'": (lambda: check_feasibility("cartpole", progress="x"), TypeError, "progress must be a function"),
        "seed=2**70": (lambda: check_feasibility("cartpole", FeasibilityConfig(seed=2**70)), ValueError, "2\\*\\*32"),
        "seed=-1": (lambda: FeasibilityConfig(seed=-1).validate(), ValueError, "2\\*\\*32"),
        "train('notakey')": (lambda: make_train(cfg)("notakey"), TypeError, "rng must be a JAX random key"),
        "train(float key)": (lambda: make_train(cfg)(jax.numpy.zeros(2)), TypeError, "rng must be a JAX random key"),
    }


API_CASES = ["make_eval(str)", "make_eval env_params", "sweep(str)", "sweep(no leaves)", "sweep key",
             "check_feasibility(123)", "check_feasibility(None)", "config='x'", "search='x'", "progress='x'",
             "seed=2**70", "seed=-1", "train('notakey')", "train(float key)"]  # fmt: skip


@pytest.mark.parametrize("case", API_CASES)
def test_the_api_names_a_wrong_type_in_one_error(case):
    call, error, match = _api_cases()[case]
    with pytest.raises(error, match=match):
        call()
