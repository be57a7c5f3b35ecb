"""Gradients of episode quantities in the kernel parameters ``xi``, from the kernel's
distrax distribution (no hand-written gradient): the one score-function estimator that
LTMA (``rcmdp_jax.ltma``) and the worst-case search (``rcmdp_jax.worst_case``) use.
Pathwise gradients need no helper: they are ``jax.grad``/``jax.jacfwd`` through episodes
whose next states are reparameterised samples (``rollout.scan_episode``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.advantages import discounts


def transition_log_probs(env, env_params, xi, s, a, s_next) -> jax.Array:
    """``log p_xi(s_next | s, a)`` of every step of a batch of episodes, ``[E, H]``."""
    per_step = jax.vmap(env.transition_log_prob, in_axes=(None, None, 0, 0, 0))
    return jax.vmap(per_step, in_axes=(None, None, 0, 0, 0))(xi, env_params, s, a, s_next)


def score_weights(to_go: jax.Array, alive: jax.Array, gamma) -> jax.Array:
    """The score function's per-step weights ``gamma^t G_t alive_t``: ``to_go`` the returns-to-go
    ``[E, H]`` (or ``[E, H, k]``, ``k`` quantities), ``alive`` ``[E, H]`` masks steps after
    termination."""
    disc = discounts(to_go.shape[1], gamma).reshape((-1,) + (1,) * (to_go.ndim - 2))
    return disc * to_go * alive.reshape(alive.shape + (1,) * (to_go.ndim - 2))


def score_surrogate(env, env_params, s, a, s_next, weights: jax.Array):
    """``xi -> mean_e sum_t w_et log p_xi(s_next | s, a)``: its gradient in ``xi`` is the
    score-function estimate of ``d E[sum_t w_t] / d xi`` when ``w_et`` are the (constant)
    per-step weights, e.g. ``gamma^t`` times a return-to-go. ``weights``: ``[E, H]`` (a
    scalar surrogate: ``jax.grad``) or ``[E, H, k]`` (``k`` quantities: ``jax.jacfwd``)."""
    weights = jax.lax.stop_gradient(weights)

    def surrogate(xi):
        lp = transition_log_probs(env, env_params, xi, s, a, s_next)
        if weights.ndim == 3:
            return jnp.mean(jnp.sum(weights * lp[..., None], axis=1), axis=0)
        return jnp.mean(jnp.sum(weights * lp, axis=1))

    return surrogate
