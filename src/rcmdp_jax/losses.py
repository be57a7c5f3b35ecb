"""The learners' math (docs/method.md §2b), each a short pure function: the PPO, MDPO and
REINFORCE losses, the critic loss and the KL estimators. Shapes: ``N`` samples of a
minibatch, ``T`` steps of one episode, ``m`` constraints. The loops that apply them
are in ``rcmdp_jax.learners``."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp


def reference_kl(log_ratio: jax.Array) -> jax.Array:
    """Per-sample ``exp(r) - 1 - r`` with ``r = log pi_theta - log pi_k`` ``[N]``; under
    samples of ``pi_k`` its mean estimates ``KL(pi_k || pi_theta)`` (the reference study's term)."""
    return jnp.exp(log_ratio) - 1.0 - log_ratio


def exact_kl(new: distrax.Distribution, old: distrax.Distribution) -> jax.Array:
    """``KL(pi_theta(.|s) || pi_k(.|s))`` per sample ``[N]``, in closed form (distrax)."""
    return new.kl_divergence(old)


def ppo_loss(log_ratio: jax.Array, adv: jax.Array, clip_eps: jax.Array) -> jax.Array:
    """Clipped surrogate, negated: ``-mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A))``;
    ``log_ratio``, ``adv`` ``[N]`` -> scalar."""
    ratio = jnp.exp(log_ratio)
    return -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))


def mdpo_loss(log_ratio: jax.Array, adv: jax.Array, kl: jax.Array, alpha: jax.Array) -> jax.Array:
    """MDPO objective, negated: ``-(mean(rho A) - alpha * mean(KL))``; ``[N]`` -> scalar."""
    return -(jnp.mean(jnp.exp(log_ratio) * adv) - alpha * jnp.mean(kl))


def critic_loss(values: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean squared error over all ``1 + m`` heads; ``[N, 1 + m]`` -> scalar."""
    return jnp.mean((values - targets) ** 2)


def normalise_episode(returns: jax.Array, mask: jax.Array) -> jax.Array:
    """``(G - mean G) / (std G + eps)`` over the steps of one episode (``mask`` = 1), with
    the unbiased standard deviation and ``eps`` = float32 machine epsilon, as the
    reference REINFORCE code does; 0 on masked steps and for one-step episodes.
    ``returns``, ``mask``: ``[T]``."""
    n = mask.sum()
    mean = jnp.sum(returns * mask) / jnp.maximum(n, 1.0)
    var = jnp.sum(((returns - mean) * mask) ** 2) / jnp.maximum(n - 1.0, 1.0)
    out = (returns - mean) / (jnp.sqrt(var) + jnp.finfo(jnp.float32).eps)
    return jnp.where(mask > 0, out, 0.0)


def reinforce_loss(log_prob: jax.Array, returns: jax.Array, mask: jax.Array) -> jax.Array:
    """REINFORCE on one episode, summed over its steps: ``-sum_t mask_t log pi(a_t|s_t) G_t``.
    ``G`` are the (normalised) returns-to-go; all arguments ``[T]``."""
    return -jnp.sum(mask * log_prob * jax.lax.stop_gradient(returns))
