"""A Pendulum box of a user's own, with no learner settings: what a new user trains first.

    rcmdp --env docs/examples/my_pendulum.py:make --algos PPO-Lag,PPO-Robust-Lag --seeds 10 --budget auto

Gymnax's Pendulum-v1 with the pole's mass and length uncertain (±20 %) and a speed limit,
|angular speed| <= 2 rad/s; everything else (budget, margin, robust method) is the framework's
default for an environment it has never seen (docs/custom_envs.md).
"""

import gymnax
import jax.numpy as jnp

from rcmdp_jax import envs


def speed(state, action, next_state, params):
    return jnp.abs(next_state.theta_dot)[None] - 2.0  # kept when the discounted sum is <= 0


def make():
    env, _ = gymnax.make("Pendulum-v1")
    return envs.robustify(env, uncertain={"m": 0.2, "l": 0.2}, costs={"speed": speed}, noise=1e-2)
