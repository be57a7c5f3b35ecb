"""``ltma-norm``: LTMA whose step does not depend on the gradient's scale. Each of
``adversary_steps`` steps (its option) takes the pathwise gradient ``g`` of the Lagrangian
cost (``rcmdp_jax.ltma.pathwise_direction``, ``adversary_episodes`` episodes of
``ltma_horizon`` steps: ``Adversary``'s options) and moves every
coordinate of ``xi`` by ``xi_step`` of its half-width along ``sign(g)``: steepest ascent
in the box's own norm (``max g . d`` over ``|d_i| <= xi_step * kappa_i``), then the
projection on the box. Where the pathwise gradient is zero (the cost reaches ``xi`` only
through discrete actions or termination, e.g. Acrobot's torque cost) the step follows the
score-function gradient of the same episodes (``rcmdp_jax.ltma.ltma_direction``), if the
kernel has a density."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, broadcast
from rcmdp_jax.ltma import ltma_direction, pathwise_direction
from rcmdp_jax.plugin import check_count
from rcmdp_jax.rollout import Policy


def normalised_step(xi, direction, kappa, fraction):
    """``xi + fraction * kappa * sign(direction)``: each coordinate moves by ``fraction`` of
    its half-width (none where the gradient is zero)."""
    return xi + fraction * kappa * jnp.sign(direction)


class NormalisedLTMA(Adversary):
    name = "ltma-norm"
    options = {"adversary_steps": 4}  # normalised steps on xi per iteration
    size_fields = ("adversary_episodes", "ltma_horizon")

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_count("adversary_steps", cfg.option("adversary_steps"))

    @classmethod
    def check_env(cls, env, cfg) -> None:
        env.check_estimator(env.default_params, "pathwise")

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        """The pathwise episodes, every step kept for the gradient."""
        return cfg.option("adversary_episodes") * (cfg.option("ltma_horizon") * record + episode)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        cfg = ctx.cfg
        policy = Policy(ctx.actor, actor_params, dropout=cfg.act_dropout)
        episodes, horizon = cfg.option("adversary_episodes"), cfg.option("ltma_horizon")

        def body(carry, k):
            p, samples = carry
            keys = jax.random.split(k, episodes)
            g, traj = pathwise_direction(ctx.env, p, policy, keys, lam_tilde, hp.gamma, horizon)
            # where the cost reaches xi only through discrete actions or termination the
            # pathwise gradient is zero: the score function of the same episodes instead
            score = ltma_direction(ctx.env, p, traj, lam_tilde, hp.gamma) if ctx.score_ok else jnp.zeros_like(g)
            g = jnp.where(jnp.any(g != 0), g, score)
            p = ctx.env.project(p.replace(xi=normalised_step(p.xi, g, p.kappa, hp.xi_step)))
            return (p, samples + traj.alive.sum()), None

        init = (params, jnp.float32(0.0))
        (params, samples), _ = jax.lax.scan(body, init, jax.random.split(key, cfg.option("adversary_steps")))
        return params, broadcast(params.xi, env_xi.shape[0]), samples
