"""Policy and critic networks (flax linen) returning distrax distributions.

Dropout sits after the first hidden layer and is active only when
``train=True`` (gradient updates); rollouts and evaluation use ``train=False``.
"""

from __future__ import annotations

from collections.abc import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp


class MLP(nn.Module):
    hidden: Sequence[int]
    out_dim: int
    dropout: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        for i, width in enumerate(self.hidden):
            x = nn.relu(nn.Dense(width)(x))
            if i == 0 and self.dropout > 0.0:
                x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.out_dim)(x)


class Actor(nn.Module):
    """Softmax policy over ``action_dim`` actions, or a Gaussian with a
    state-independent log-std (initialised to 0) when ``discrete=False``."""

    action_dim: int
    hidden: Sequence[int]
    discrete: bool = True
    dropout: float = 0.0

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> distrax.Distribution:
        out = MLP(self.hidden, self.action_dim, self.dropout)(obs, train)
        if self.discrete:
            return distrax.Categorical(logits=out)
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return distrax.MultivariateNormalDiag(out, jnp.exp(log_std) * jnp.ones_like(out))


class Critic(nn.Module):
    """Values of the reward and of each constraint-cost stream: ``(..., 1 + m)``."""

    num_heads: int
    hidden: Sequence[int]
    dropout: float = 0.0

    @nn.compact
    def __call__(self, obs: jax.Array, train: bool = False) -> jax.Array:
        return MLP(self.hidden, self.num_heads, self.dropout)(obs, train)
