"""What the make_train test files share (not a test file): their seeds and one compiled program
per configuration trained alone. The tiny configurations are in ``tiny_configs.py``."""

import functools

import jax
import numpy as np

from rcmdp_jax import envs, make_train

SEEDS = jax.random.split(jax.random.PRNGKey(42), 2)


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
