"""LTMA: Lagrangian transition mirror ascent on the kernel parameters ``xi`` (docs/method.md §2c)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.advantages import episode_returns_to_go
from rcmdp_jax.constraints import lagrangian_cost
from rcmdp_jax.kernel_gradients import mean_quantities, score_gradient, score_surrogate, score_weights
from rcmdp_jax.rollout import Policy, Trajectory, reward_and_costs, sample_episode, value_discounts


def step_costs(traj: Trajectory, lam_tilde: jax.Array) -> jax.Array:
    """``cL_t = -r_t + sum_j lam~_j c_j,t`` (``constraints.lagrangian_cost``) of every step,
    ``[..., H]``, masked after termination."""
    return lagrangian_cost(traj.reward, traj.costs, lam_tilde) * traj.alive


def ltma_direction(env, env_params, traj: Trajectory, lam_tilde, gamma) -> jax.Array:
    """Monte-Carlo ascent direction for ``xi`` from episodes ``traj`` (leaves ``[E, H, ...]``):

    ``mean_e sum_t gamma^t G_t grad_xi log p_xi(s_{t+1} | s_t, a_t)``, with
    ``G_t = sum_{l>=t} gamma^(l-t) cL_l``; the gradient is ``jax.grad`` of the
    environment's distrax ``log_prob`` (``kernel_gradients.score_surrogate``). Where a
    constraint has a discount of its own (``rollout.value_discounts``), each quantity's
    weights are discounted by its own and then combined, ``-r`` and ``lam~_j c_j``.
    """
    if getattr(env, "cost_gammas", None) is None:
        return score_gradient(env, env_params, env_params.xi, traj, step_costs(traj, lam_tilde), gamma)
    gammas = value_discounts(env, gamma)
    to_go = episode_returns_to_go(reward_and_costs(traj) * traj.alive[..., None], gammas)
    weights = score_weights(to_go, traj.alive, gammas) @ jnp.concatenate([-jnp.ones((1,)), lam_tilde])
    return jax.grad(score_surrogate(env, env_params, traj.s, traj.action, traj.s_next, weights))(env_params.xi)


def pathwise_direction(env, env_params, policy, keys, lam_tilde, gamma, horizon: int):
    """The pathwise ascent direction: ``jax.grad`` in ``xi`` of the Lagrangian cost
    ``lam~ . C - V`` of the episodes of ``keys``, whose ``[V, C]``
    (``kernel_gradients.mean_quantities``) are differentiable through the reparameterised
    next states (``s' = mean(xi, s, a) + std * eps``: distrax's ``sample``). How ``xi``
    changes the sampled actions and the termination time is not differentiated (a bias the
    score function does not have). Returns ``(direction, episodes)``."""

    def cost(xi):
        values, traj = mean_quantities(xi, env, env_params, policy, keys, gamma, horizon)
        return lagrangian_cost(values[0], values[1:], lam_tilde), traj

    return jax.grad(cost, has_aux=True)(env_params.xi)


def ltma_step(key, env, env_params, actor, actor_params, lam_tilde, eta_xi, gamma, n_episodes, horizon, dropout=False,
              estimator: str = "score"):  # fmt: skip
    """One projected step ``xi <- Proj_U(xi + eta_xi * direction)``; returns ``(params, samples)``.
    The episodes come from the stochastic policy (in training mode when ``dropout``);
    the direction is the score function's (the study's) or the pathwise gradient."""
    policy = Policy(actor, actor_params, dropout=dropout)

    keys = jax.random.split(key, n_episodes)
    if estimator == "pathwise":
        direction, traj = pathwise_direction(env, env_params, policy, keys, lam_tilde, gamma, horizon)
    else:
        traj = jax.vmap(lambda k: sample_episode(k, env, env_params, policy, horizon))(keys)
        direction = ltma_direction(env, env_params, traj, lam_tilde, gamma)
    new = env.project(env_params.replace(xi=env_params.xi + eta_xi * direction))
    return new, traj.alive.sum()


def ltma_phase(key, env, env_params, actor, actor_params, lam_tilde, hp, cfg):
    """``ltma_iterations`` sequential LTMA steps warm-started from ``env_params.xi`` (``cfg``'s
    options of the ``ltma`` method, ``rcmdp_jax.adversary.ltma``)."""

    def body(carry, k):
        params, samples = carry
        params, n = ltma_step(
            k, env, params, actor, actor_params, lam_tilde, hp.eta_xi, hp.gamma, cfg.option("ltma_episodes"),
            cfg.option("ltma_horizon"), cfg.act_dropout, cfg.option("ltma_estimator"),
        )  # fmt: skip
        return (params, samples + n), None

    (params, samples), _ = jax.lax.scan(
        body, (env_params, jnp.float32(0.0)), jax.random.split(key, cfg.option("ltma_iterations"))
    )
    return params, samples
