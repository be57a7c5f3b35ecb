"""``worst-of-n``: EPOpt's idea. Draw ``adversary_candidates`` kernels uniformly from the
box, run the current policy on each, and train on the worst ``adversary_fraction`` of
them by the Lagrangian cost: rollout env ``i`` gets the ``i mod k``-th worst of the
``k`` worst; the adversary's own kernel is the worst."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, lagrangian_costs, uniform_kernels


def worst_kernels(costs: jax.Array, xis: jax.Array, k: int, n_envs: int) -> tuple[jax.Array, jax.Array]:
    """``(the worst kernel, [n_envs] kernels cycling over the k worst)`` by ``costs`` (higher is worse)."""
    _, worst = jax.lax.top_k(costs, k)
    return xis[worst[0]], xis[worst[jnp.arange(n_envs) % k]]


class WorstOfN(Adversary):
    name = "worst-of-n"
    per_env = True

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        cfg = ctx.cfg
        k_draw, k_run = jax.random.split(key)
        xis = uniform_kernels(k_draw, params, cfg.adversary_candidates)
        costs, steps = lagrangian_costs(ctx, k_run, params, xis, actor_params, lam_tilde, hp)
        k = max(1, math.ceil(cfg.adversary_fraction * cfg.adversary_candidates))
        worst, env_xi = worst_kernels(costs, xis, k, env_xi.shape[0])
        return params.replace(xi=worst), env_xi, steps
