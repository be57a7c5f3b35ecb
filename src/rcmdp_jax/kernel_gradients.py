"""Gradients of episode quantities in the kernel parameters ``xi``, from the kernel's
distrax distribution (no hand-written gradient), for LTMA and its variants
(``rcmdp_jax.ltma``, ``rcmdp_jax.adversary``) and the worst-case search
(``rcmdp_jax.worst_case``):

* the Monte-Carlo ``[V, C]`` at ``xi`` (``mean_quantities``), differentiable in ``xi``
  through the episodes' next states, reparameterised samples (distrax's ``sample``): its
  ``jax.grad``/``jax.jacfwd`` is the *pathwise* gradient;
* the *score-function* surrogate of the same episodes (``score_surrogate``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.advantages import discounts, episode_returns_to_go
from rcmdp_jax.rollout import Trajectory, fold_values, init_values, scan_episode, value_discounts


def has_density(env) -> bool:
    """Whether the kernel has a density (the score-function gradient exists)."""
    try:
        env.check_estimator(env.default_params, "score")
    except ValueError:
        return False
    return True


def episode_quantities(key, env, env_params, policy, gamma, horizon: int, truncate: int = 0):
    """One episode under ``env_params``: its discounted return and constraint values
    ``[1 + m]``, and its steps (a ``Trajectory``, leaves ``[H, ...]``) for the score
    function. ``truncate``: see ``rollout.scan_episode`` (it changes no value). Each ``C_j``
    is discounted by its ``gamma_c`` (``rollout.value_discounts``)."""
    gamma = value_discounts(env, gamma)
    fold = lambda acc, st: fold_values(acc, st, gamma)

    def emit(st):
        return Trajectory(st.s, st.action, st.s_next, st.reward, st.costs, st.alive)

    init = init_values(env.num_constraints, gamma)
    (_, total), steps = scan_episode(key, env, env_params, policy, horizon, emit=emit, fold=fold, init=init,
                                     truncate=truncate)  # fmt: skip
    return total, steps


def mean_quantities(xi, env, env_params, policy, keys, gamma, horizon: int, truncate: int = 0):
    """``[V, C_1..C_m]`` at ``xi``, the mean over the episodes of ``keys``, and the episodes
    (a ``Trajectory``, leaves ``[E, H, ...]``). Its derivative in ``xi`` is the pathwise
    gradient: how ``xi`` moves the sampled actions and the termination time is not
    differentiated (a bias the score function does not have)."""
    params = env_params.replace(xi=xi)
    totals, steps = jax.vmap(lambda k: episode_quantities(k, env, params, policy, gamma, horizon, truncate))(keys)
    return totals.mean(0), steps


def transition_log_probs(env, env_params, xi, s, a, s_next) -> jax.Array:
    """``log p_xi(s_next | s, a)`` of every step of a batch of episodes, ``[E, H]``."""
    per_step = jax.vmap(env.transition_log_prob, in_axes=(None, None, 0, 0, 0))
    return jax.vmap(per_step, in_axes=(None, None, 0, 0, 0))(xi, env_params, s, a, s_next)


def score_weights(to_go: jax.Array, alive: jax.Array, gamma) -> jax.Array:
    """The score function's per-step weights ``gamma^t G_t alive_t``: ``to_go`` the returns-to-go
    ``[E, H]`` (or ``[E, H, k]``, ``k`` quantities, with one ``gamma`` or ``k``), ``alive``
    ``[E, H]`` masks steps after termination."""
    disc = discounts(to_go.shape[1], gamma)
    if disc.ndim == 1:
        disc = disc.reshape((-1,) + (1,) * (to_go.ndim - 2))
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


def score_gradient(env, env_params, xi, traj: Trajectory, per_step: jax.Array, gamma, differentiate=jax.grad,
                   leave_one_out: bool = False):  # fmt: skip
    """The score-function estimate at ``xi`` of the gradient of ``E[sum_t gamma^t x_t]``
    from episodes ``traj`` (leaves ``[E, H, ...]``): ``per_step`` the masked per-step
    quantity ``x`` (``[E, H]``, or ``[E, H, k]`` for ``k`` quantities), its returns-to-go as
    the weights of ``score_surrogate``, differentiated by ``differentiate`` (``jax.grad``;
    ``jax.jacfwd`` for ``k`` quantities). ``leave_one_out``: each episode's returns-to-go
    less the other episodes' mean (a baseline that keeps the estimate unbiased)."""
    to_go = episode_returns_to_go(per_step, gamma)
    if leave_one_out:
        n = to_go.shape[0]
        to_go = to_go - (to_go.sum(0, keepdims=True) - to_go) / max(n - 1, 1)
    weights = score_weights(to_go, traj.alive, gamma)
    surrogate = score_surrogate(env, env_params, traj.s, traj.action, traj.s_next, weights)
    return differentiate(surrogate)(xi)
