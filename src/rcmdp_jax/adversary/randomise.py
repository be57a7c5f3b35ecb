"""``dr``: domain randomisation. Every training episode runs on a kernel drawn uniformly
from the box: the batch learners' rollout draws an env's kernel anew when its episode
ends (``redraw``); MCPMD, one episode an iteration, draws one each iteration. The
adversary's own kernel (dual phase's fallback, evaluation) stays nominal."""

from __future__ import annotations

import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, uniform_kernels


class DomainRandomisation(Adversary):
    name = "dr"
    per_env = True
    redraw = True

    def init_env_xi(self, key, params, n_envs: int):
        return uniform_kernels(key, params, n_envs)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        if ctx.episodic:  # the next iteration is a new episode
            env_xi = uniform_kernels(key, params, env_xi.shape[0])
        return params, env_xi, jnp.float32(0.0)
