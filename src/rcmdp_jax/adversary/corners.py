"""``corners``: run the current policy on every corner ``xi_c + kappa * d``,
``d in {-1, +1}^n``, of the box and train against the one with the highest Lagrangian
cost. ``n`` up to ``MAX_PARAMS`` (``2^n`` kernels an iteration)."""

from __future__ import annotations

import jax.numpy as jnp

from rcmdp_jax import box
from rcmdp_jax.adversary.candidates import CandidateMethod, with_dual

MAX_PARAMS = 8


def corner_kernels(env, params) -> jnp.ndarray:
    """The ``2^n`` corners of the box, ``[2^n, *xi.shape]`` (``box.corners``)."""
    return box.corners(params.xi_c, params.kappa)


class Corners(CandidateMethod):
    name = "corners"
    size_fields = ("adversary_episodes",)

    @classmethod
    def check_env(cls, env, cfg) -> None:
        if env.num_kernel_params > MAX_PARAMS:
            raise ValueError(f"adversary='corners' runs 2^n kernels an iteration: {env.name} has n="
                             f"{env.num_kernel_params} kernel parameters (at most {MAX_PARAMS}); choose "
                             f"worst-of-n or ltma-norm")  # fmt: skip

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        """Every corner's episodes at once (at most ``2^MAX_PARAMS``)."""
        return 2**MAX_PARAMS * cfg.option("adversary_episodes") * episode

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        xis = corner_kernels(ctx.env, params)
        costs, dual_xi, steps, scores = self.evaluate(ctx, key, params, xis, actor_params, lam_tilde, hp)
        own, env_xi = self.env_kernels(ctx, costs, scores, xis, lam_tilde, 1, env_xi.shape[0])
        return with_dual((params.replace(xi=own), env_xi, steps), dual_xi)
