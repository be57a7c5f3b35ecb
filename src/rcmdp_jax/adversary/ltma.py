"""``ltma``: the study's adversary, ``ltma_iterations`` steps ``xi <- Proj(xi + eta_xi * g)``
with the score-function gradient ``g`` (``rcmdp_jax.ltma``; option ``ltma_estimator``), each
on ``ltma_episodes`` episodes of ``ltma_horizon`` steps (``Adversary``'s option).

Option ``ltma_dual_reading`` — where the dual phase reads the constraint values ``C^``:

* ``"found"``: at the kernel the ascent found, as the study does. The ascent climbs the
  Lagrangian cost ``lam~ . C - V``, mostly ``-V`` while ``lam~`` is small, so it can settle where
  the constraint is cheap to keep: on Inventory 1-D at a cost threshold of 0.13, the corner where
  the costly order costs least; ``C^`` read there stays below the limit, ``lam~`` stays small and
  the policy breaks the constraint at the nominal kernel (docs/robustness_findings.md).
* ``"guarded"``: at the worse, by ``C`` (of its most violated constraint), of the kernel found and
  the nominal kernel (the box's centre), each valued on ``adversary_episodes`` whole episodes with
  common random numbers: the multiplier then rises whenever the nominal kernel breaks it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, broadcast, candidate_values
from rcmdp_jax.adversary.candidates import worst_cost_kernel
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.plugin import check_choice, check_count

ESTIMATORS = ("score", "pathwise")
DUAL_READINGS = ("found", "guarded")


class StudyLTMA(Adversary):
    name = "ltma"
    options = {
        # the gradient of the Lagrangian cost in xi: the reference study's score function, or
        # the pathwise (reparameterised next states) gradient through the adversary's episodes
        "ltma_estimator": "score",
        "ltma_iterations": 160,  # steps on xi per iteration
        "ltma_episodes": 1,  # episodes per step
        "ltma_dual_reading": "found",  # where the dual reads C^ (the module's doc); presets: "guarded" outside the study
    }
    size_fields = ("ltma_episodes", "ltma_horizon")

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_choice("ltma_estimator", cfg.option("ltma_estimator"), ESTIMATORS)
        check_choice("ltma_dual_reading", cfg.option("ltma_dual_reading"), DUAL_READINGS)
        for name in ("ltma_iterations", "ltma_episodes"):
            check_count(name, cfg.option(name))

    @classmethod
    def check_env(cls, env, cfg) -> None:
        env.check_estimator(env.default_params, cfg.option("ltma_estimator"))

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return cfg.option("ltma_dual_reading") == "guarded"

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        """Its episodes, every step kept for the gradient (and the guard's two kernels' episodes)."""
        guard = 2 * cfg.option("adversary_episodes") * episode if cls.reads_cost(cfg) else 0.0
        return cfg.option("ltma_episodes") * (cfg.option("ltma_horizon") * record + episode) + guard

    @classmethod
    def counts(cls, cfg, episode_length: int) -> tuple[tuple[str, str, int], ...]:
        n = cfg.option("ltma_episodes") * cfg.option("ltma_horizon")
        return (("ltma_horizon", "ltma_episodes x ltma_horizon adversary steps", n),)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        params, samples = ltma_phase(key, ctx.env, params, ctx.actor, actor_params, lam_tilde, hp, ctx.cfg)
        out = params, broadcast(params.xi, env_xi.shape[0]), samples
        if not self.reads_cost(ctx.cfg):
            return out
        dual_xi, steps = guarded_kernel(ctx, jax.random.fold_in(key, 1), params, actor_params, lam_tilde, hp)
        return out[0], out[1], samples + steps, dual_xi


def guarded_kernel(ctx, key, params, actor_params, lam_tilde, hp):
    """``(the worse by C of the kernel found and the nominal kernel, steps)`` (``"guarded"``)."""
    xis = jnp.stack([params.xi, jnp.broadcast_to(params.xi_c, jnp.shape(params.xi))])
    _, values, steps = candidate_values(ctx, key, params, xis, actor_params, lam_tilde, hp)
    return worst_cost_kernel(xis, values), steps
