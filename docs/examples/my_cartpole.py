"""A CartPole box of a user's own, with no learner settings (as docs/examples/my_pendulum.py).

    rcmdp --env docs/examples/my_cartpole.py:make --algos PPO-Lag,PPO-Robust-Lag --seeds 10 --budget auto

Gymnax's CartPole-v1 with the pole's mass and length uncertain (±30 %, ±20 %) and a limit on the
cart's speed, |x_dot| <= 1; everything else is the framework's default.
"""

import gymnax
import jax.numpy as jnp

from rcmdp_jax import envs


def speed(state, action, next_state, params):
    return jnp.abs(next_state.x_dot)[None] - 1.0  # kept when the discounted sum is <= 0


def make():
    env, _ = gymnax.make("CartPole-v1")
    return envs.robustify(env, uncertain={"masspole": 0.3, "length": 0.2}, costs={"speed": speed}, noise=1e-3)
