"""``ltma``: the study's adversary, ``ltma_iterations`` steps ``xi <- Proj(xi + eta_xi * g)``
with the score-function gradient ``g`` (``rcmdp_jax.ltma``; option ``ltma_estimator``), each
on ``ltma_episodes`` episodes of ``ltma_horizon`` steps (``Adversary``'s option)."""

from __future__ import annotations

from rcmdp_jax.adversary.base import Adversary, broadcast
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.plugin import check_choice, check_count

ESTIMATORS = ("score", "pathwise")


class StudyLTMA(Adversary):
    name = "ltma"
    options = {
        # the gradient of the Lagrangian cost in xi: the reference study's score function, or
        # the pathwise (reparameterised next states) gradient through the adversary's episodes
        "ltma_estimator": "score",
        "ltma_iterations": 160,  # steps on xi per iteration
        "ltma_episodes": 1,  # episodes per step
    }
    size_fields = ("ltma_episodes", "ltma_horizon")

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_choice("ltma_estimator", cfg.option("ltma_estimator"), ESTIMATORS)
        for name in ("ltma_iterations", "ltma_episodes"):
            check_count(name, cfg.option(name))

    @classmethod
    def check_env(cls, env, cfg) -> None:
        env.check_estimator(env.default_params, cfg.option("ltma_estimator"))

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        """Its episodes, every step kept for the gradient."""
        return cfg.option("ltma_episodes") * (cfg.option("ltma_horizon") * record + episode)

    @classmethod
    def counts(cls, cfg, episode_length: int) -> tuple[tuple[str, str, int], ...]:
        n = cfg.option("ltma_episodes") * cfg.option("ltma_horizon")
        return (("ltma_horizon", "ltma_episodes x ltma_horizon adversary steps", n),)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        params, samples = ltma_phase(key, ctx.env, params, ctx.actor, actor_params, lam_tilde, hp, ctx.cfg)
        return params, broadcast(params.xi, env_xi.shape[0]), samples
