"""What the make_train test files share (not a test file): their seeds, a tiny
configuration, and one compiled program per configuration trained alone."""

import functools

import jax
import numpy as np

from rcmdp_jax import envs, make_train, preset

SEEDS = jax.random.split(jax.random.PRNGKey(42), 2)


def tiny(env="cartpole", algo="MDPO-Robust-Lag", iterations=3, **kw):
    """A few iterations (3 by default: enough for state carried between them) on a tiny batch;
    MCPMD keeps its one-episode batch and gets a budget of about ``iterations`` episodes."""
    base = dict(total_timesteps=64 * iterations, n_steps=16, minibatch_size=16, epochs=2,
                ltma_iterations=3, eval_episodes=2, dual_estimator="start_value")  # fmt: skip
    if "MCPMD" in algo:
        episode = envs.REGISTRY[env].episode_length
        base = dict(total_timesteps=episode * iterations, ltma_iterations=3, eval_episodes=2, eval_every=1,
                    dual_estimator="start_value")  # fmt: skip
    base.update(kw)
    return preset(env, algo, **base)


@functools.cache
def _alone_program(cfg):
    return jax.jit(make_train(cfg))


def alone(cfg, key, hp=None, kernel=None):
    """``cfg`` trained alone on seed ``key`` through one compiled program per config for the
    process (several tests compare with it): the hyperparameters and the training kernel
    are its arguments, the preset's unless given."""
    hp = cfg.hparams if hp is None else hp
    kernel = envs.make(cfg.env)[1] if kernel is None else kernel
    return _alone_program(cfg)(key, *jax.tree.map(np.asarray, (hp, kernel)))
