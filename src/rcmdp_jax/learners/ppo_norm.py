"""``ppo-norm``: PPO with a running normalisation of the observations (the algorithms
``PPO-NORM``, ``PPO-NORM-Lag``, ``PPO-NORM-Robust-Lag`` ...).

The running mean and variance of every observation the learner has trained on are the
learner's own state (``TrainState.learner_state``: ``count``, ``mean``, ``var``), updated
from each batch after the policy update (Chan, Golub & LeVeque's pairwise combination, so
they equal the mean and the population variance of all batches so far). The networks see
``clip((obs - mean) / sqrt(var + 1e-8), -10, 10)``: each is wrapped (``Learner.networks``)
in ``ObsNormalised``, which reads ``mean`` and ``var`` from a collection of its own,
``obs_norm``, beside ``params`` in the actor's and the critic's variables. The statistics
live in the variables because every phase that runs a policy -- the rollouts, the dual
phase, the robust methods' candidate episodes, the training curve, the test sweep, the
worst-case search -- calls ``actor.apply(variables, obs)`` on what the train state or the
checkpoint holds: none of them needs to know the learner. The collection is not trained
(its gradient is stopped, so Adam's and SGD's updates of it are zero); the learner copies
its state into it after each update, and the copy is what a checkpoint's policy applies.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from rcmdp_jax.learners.ppo import PPO

EPS, CLIP = 1e-8, 10.0  # Stable-Baselines3 VecNormalize's epsilon and observation clip


class ObsNormalised(nn.Module):
    """``inner`` (an actor or critic) on normalised observations, the statistics read from
    the ``obs_norm`` collection (``mean`` 0 and ``var`` 1 at init: the raw observations)."""

    inner: nn.Module

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False):
        dim = obs.shape[-1:]
        mean = self.variable("obs_norm", "mean", lambda: jnp.zeros(dim, jnp.float32)).value
        var = self.variable("obs_norm", "var", lambda: jnp.ones(dim, jnp.float32)).value
        z = (obs - jax.lax.stop_gradient(mean)) * jax.lax.rsqrt(jax.lax.stop_gradient(var) + EPS)
        return self.inner(jnp.clip(z, -CLIP, CLIP), train)


def running_update(stats: dict, batch: jax.Array) -> dict:
    """``stats`` (``count``, ``mean``, ``var``: the population variance) after the rows of
    ``batch`` ``[N, obs_dim]``, combined pairwise (Chan et al.)."""
    n_a, n_b = stats["count"], jnp.float32(batch.shape[0])
    mean_b, var_b = jnp.mean(batch, 0), jnp.var(batch, 0)
    n = n_a + n_b
    delta = mean_b - stats["mean"]
    mean = stats["mean"] + delta * (n_b / n)
    m2 = stats["var"] * n_a + var_b * n_b + delta**2 * (n_a * n_b / n)
    return dict(count=n, mean=mean, var=m2 / n)


class PPONorm(PPO):
    """PPO whose actor and critic see running-normalised observations (the module's text)."""

    @classmethod
    def networks(cls, actor, critic):
        return ObsNormalised(actor), ObsNormalised(critic)

    def init_state(self, params, hp):
        dim = (self.env.obs_dim,)
        return dict(count=jnp.float32(0.0), mean=jnp.zeros(dim, jnp.float32), var=jnp.ones(dim, jnp.float32))

    def update(self, key, state, data, signal, hp, schedule):
        state, steps, metrics = super().update(key, state, data, signal, hp, schedule)
        stats = running_update(state.learner_state, data.obs.reshape((-1, data.obs.shape[-1])))
        seen = {"mean": stats["mean"], "var": stats["var"]}
        params = {k: {**v, "obs_norm": seen} for k, v in state.params.items()}
        return state.replace(learner_state=stats, params=params), steps, metrics
