"""Advantage estimators and discounted sums, each written once: GAE (bootstrapping through
truncation), Monte-Carlo returns, the discount factors ``gamma^t`` and the running discounted
sum of a fresh episode."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(
    rewards: jax.Array,
    values: jax.Array,
    next_values: jax.Array,
    terminated: jax.Array,
    done: jax.Array,
    gamma: jax.Array,
    lam: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over ``[T, B, K]`` streams.

    ``delta_t = r_t + gamma * (1 - term_t) * V(s'_t) - V(s_t)``,
    ``A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}``.
    ``next_values`` is the critic at the true next observation (the final one
    before an auto-reset), so time-limit truncation bootstraps and only true
    termination cuts the value. ``terminated``/``done`` are ``[T, B]``.
    Returns ``(advantages, returns = advantages + values)``.
    """
    not_term = (1.0 - terminated.astype(values.dtype))[..., None]
    not_done = (1.0 - done.astype(values.dtype))[..., None]
    deltas = rewards + gamma * not_term * next_values - values

    def body(carry, x):
        delta, nd = x
        adv = delta + gamma * lam * nd * carry
        return adv, adv

    _, adv = jax.lax.scan(body, jnp.zeros_like(deltas[0]), (deltas, not_done), reverse=True)
    return adv, adv + values


def discounted_returns(rewards: jax.Array, done: jax.Array, gamma: jax.Array) -> jax.Array:
    """Monte-Carlo returns ``G_t = r_t + gamma (1 - done_t) G_{t+1}`` over ``[T, B, ...]``,
    with no bootstrap past the last step."""
    not_done = 1.0 - done.astype(rewards.dtype)
    not_done = not_done.reshape(not_done.shape + (1,) * (rewards.ndim - not_done.ndim))

    def body(carry, x):
        r, nd = x
        g = r + gamma * nd * carry
        return g, g

    _, out = jax.lax.scan(body, jnp.zeros_like(rewards[0]), (rewards, not_done), reverse=True)
    return out


def episode_returns_to_go(rewards: jax.Array, gamma: jax.Array) -> jax.Array:
    """Returns-to-go of each of a batch of whole episodes, ``[E, H, ...]`` -> ``[E, H, ...]``
    (no episode boundary inside an episode, no bootstrap past its end)."""
    return jax.vmap(lambda r: discounted_returns(r, jnp.zeros(r.shape[:1]), gamma))(rewards)


def discounts(horizon: int, gamma: jax.Array) -> jax.Array:
    """``gamma^t`` for ``t = 0 .. horizon - 1``, ``[horizon]``; ``[horizon, k]`` for a vector
    ``gamma`` of ``k`` discounts (one per quantity)."""
    t = jnp.arange(horizon, dtype=jnp.float32)
    return gamma ** (t if jnp.ndim(gamma) == 0 else t[:, None])


def discounted_fold(acc: tuple[jax.Array, jax.Array], x: jax.Array, alive: jax.Array, gamma: jax.Array):
    """One step of a fresh episode's discounted sum, kept in a scan's carry: ``acc = (gamma^t,
    sum so far)`` -> ``(gamma^(t+1), sum + alive_t gamma^t x_t)`` (``alive`` masks the steps
    after termination); start from ``(1, 0)``."""
    disc, total = acc
    return disc * gamma, total + alive * disc * x


def normalise(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    return (x - x.mean()) / (x.std() + eps)
