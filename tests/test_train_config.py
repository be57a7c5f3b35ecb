"""Presets and configuration checks: the presets follow the spec table; a bad
configuration or bad hyperparameters are a clear error before anything is traced."""

import jax
import pytest
from tiny_configs import tiny
from train_helpers import SEEDS

from rcmdp_jax import HParams, make_train, preset


def test_presets_follow_the_spec_table():
    c = preset("cartpole", "PPO-Lag")
    assert (c.learner, c.constraint, c.robust, c.epochs, c.hparams.target_kl) == ("ppo", "lagrangian", False, 50, 0.01)
    assert (c.n_envs, c.n_steps, c.minibatch_size, c.total_timesteps) == (4, 400, 32, 20_000)
    c = preset("cartpole", "RMCPMD-Lag", budget="long")
    assert (c.learner, c.robust, c.n_envs, c.n_steps, c.epochs) == ("mcpmd", True, 1, 100, 1)
    assert c.option("ltma_iterations") == 10
    assert (c.dual_epochs, c.dual_steps, c.n_dual_episodes, c.act_dropout) == (1, 1, 1, True)
    assert c.total_timesteps == 200_000 and c.num_iterations * 6 >= 200_000  # slots for the shortest episodes
    c = preset("inventory", "PPO-Lag")
    assert (c.epochs, c.dual_epochs, c.dual_steps, c.dual_epochs_from_policy, c.hparams.alpha_decay) == (
        5,
        5,
        65,
        False,
        0.95,
    )
    c = preset("cartpole", "PPO-Lag")
    assert (c.dual_epochs, c.dual_epochs_from_policy, c.kl_check, c.hparams.alpha_decay) == (50, True, "sb3", 0.99)
    c = preset("inventory", "MDPO-Robust-Augmented-Lag")
    assert (c.constraint, c.option("ltma_iterations"), c.option("ltma_horizon"), c.hparams.eta_xi, c.policy_hidden) == (
        "augmented",
        400,
        40,
        0.1,
        (64,),
    )
    c = preset("inventory3d", "MDPO-Robust")
    assert (c.optimizer, c.policy_hidden, c.total_timesteps) == ("sgd", (128, 128), 40_000)
    assert c.option("ltma_iterations") == 320
    c = preset("inventory3d", "RMCPMD")
    assert (c.option("ltma_iterations"), c.num_iterations, c.optimizer) == (20, 400, "adam")  # method.md §2b: Adam


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(algorithm="MDPO-Robust-Lagrangian"), "unknown algorithm 'MDPO-Robust-Lagrangian'.*MDPO-Robust-Lag"),
        (dict(env="pendulum"), "env='pendulum'.*cartpole, inventory, inventory3d"),
        (dict(budget="huge"), "budget='huge'.*short, long"),
        (dict(lr=-1.0), "lr must be a finite number > 0"),
        (dict(minibatch_size=33), "minibatch_size=33 must divide the batch"),
        (dict(learner_rate=1.0), r"unknown config field\(s\) \['learner_rate'\]"),
        (dict(alpha_schedule="cosine"), "alpha_schedule='cosine'.*fixed, linear, restart, geometric"),
        (dict(n_envs=0), "n_envs must be a positive integer"),
    ],
)
def test_bad_config_is_a_clear_error(kwargs, match):
    args = dict(env="cartpole", algorithm="MDPO", budget="short")
    overrides = {k: v for k, v in kwargs.items() if k not in args}
    args.update({k: v for k, v in kwargs.items() if k in args})
    with pytest.raises(ValueError, match=match):
        preset(args["env"], args["algorithm"], args["budget"], **overrides)


def test_bad_hparams_are_rejected_before_tracing():
    train = make_train(tiny(algo="MDPO"))
    with pytest.raises(ValueError, match="gamma must be a number in"):
        from rcmdp_jax.hparams import validate_hparams

        validate_hparams(HParams(gamma=1.5))
    with pytest.raises(ValueError, match="hparams must be an rcmdp_jax.HParams"):
        train(SEEDS[0], {"lr": 1.0})


def test_jax_enable_x64_is_refused_before_tracing():
    """The programs carry float32 state: with x64 on, tracing failed deep in a while_loop (JAX's
    carry-type error); now the config refuses, naming the setting, before anything is traced."""
    with jax.enable_x64(True):
        with pytest.raises(ValueError, match="jax_enable_x64 is on"):
            preset("cartpole", "PPO-Lag")
    assert preset("cartpole", "PPO-Lag").learner == "ppo"  # off again: accepted
