"""``ltma``: the study's adversary, ``ltma_iterations`` steps ``xi <- Proj(xi + eta_xi * g)``
with the score-function gradient ``g`` (``rcmdp_jax.ltma``; ``cfg.ltma_estimator``)."""

from __future__ import annotations

from rcmdp_jax.adversary.base import Adversary, broadcast
from rcmdp_jax.ltma import ltma_phase


class StudyLTMA(Adversary):
    name = "ltma"

    @classmethod
    def check_env(cls, env, cfg) -> None:
        env.check_estimator(env.default_params, cfg.ltma_estimator)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        params, samples = ltma_phase(key, ctx.env, params, ctx.actor, actor_params, lam_tilde, hp, ctx.cfg)
        return params, broadcast(params.xi, env_xi.shape[0]), samples
