"""``ltma``: the study's adversary, ``ltma_iterations`` steps ``xi <- Proj(xi + eta_xi * g)``
with the score-function gradient ``g`` (``rcmdp_jax.ltma``; option ``ltma_estimator``), each
on ``ltma_episodes`` episodes of ``ltma_horizon`` steps (``Adversary``'s option).

Option ``ltma_dual_reading`` — where the dual phase reads the constraint values ``C^``:

* ``"found"``: at the kernel the ascent found, as the study does. The ascent climbs the
  Lagrangian cost ``lam~ . C - V``, mostly ``-V`` while ``lam~`` is small, so it can settle where
  the constraint is cheap to keep: on Inventory 1-D at a cost threshold of 0.13, the corner where
  the costly order costs least; ``C^`` read there stays below the limit, ``lam~`` stays small and
  the policy breaks the constraint at the nominal kernel (docs/robustness_findings.md).
* ``"guarded"``: the constraint's own worst of two kernels, the one found and the nominal one
  (the box's centre), each valued on ``adversary_episodes`` whole episodes with common random
  numbers: the dual reads ``C^`` at the worse by ``C`` (of its most violated constraint), and —
  the RCMDP's separate worst cases, as ``worst-of-n``'s "separate" (``candidates``) — while
  ``lam~ != 0`` rollout env ``b`` serves objective ``b mod (1 + m)``: the reward's envs run the
  kernel found, constraint ``j``'s the worse for ``C_j``, and the learner weights each env's
  advantages to its own objective. Reading ``C^`` at the nominal kernel alone is not enough: the
  multiplier then rises, but the policy's cost signal still comes from the kernel found, where
  the costly order is cheap (two seeds in ten still broke the constraint at the nominal kernel at
  400,000 steps, against none's 0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, broadcast, candidate_values, require_env_per_objective
from rcmdp_jax.adversary.candidates import worst_cost_kernel
from rcmdp_jax.env_settings import check_count_setting, where
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.plugin import Number, check_choice, check_count

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
    # per environment (``LearnerSpec.plugins["ltma"]``): steps on xi per 100 policy steps of a batch
    # learner's batch and per episode of an episodic one (MCPMD), the horizon of the episodes the
    # gradient is taken on (``ltma_horizon``: ltma-norm's too) and where the dual reads C^
    env_settings = {
        "per_100": Number(5.0, 0.0, open_low=True),
        "per_episode": 10,
        "horizon": 20,
        "dual_reading": "guarded",
    }

    @classmethod
    def check_settings(cls, settings):
        for key in ("per_episode", "horizon"):
            check_count_setting("ltma", key, settings[key])
        check_choice(where("ltma", "dual_reading"), settings["dual_reading"], DUAL_READINGS)

    @classmethod
    def preset(cls, fields, settings, domain):
        from rcmdp_jax import learners

        if learners.episodic(fields["learner"]):
            iterations = settings["per_episode"]
        else:
            iterations = max(1, round(fields["n_envs"] * fields["n_steps"] * settings["per_100"] / 100))
        return {**fields, "ltma_iterations": iterations, "ltma_horizon": settings["horizon"],
                "ltma_dual_reading": settings["dual_reading"]}  # fmt: skip

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
        if cls.separate(cfg):
            require_env_per_objective(env, cfg, "ltma_dual_reading='guarded'", "ltma_dual_reading='found'")

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return cfg.option("ltma_dual_reading") == "guarded"

    @classmethod
    def own_env_kernels(cls, cfg) -> bool:
        return cls.separate(cfg)

    @classmethod
    def separate(cls, cfg) -> bool:
        """Guarded, the reward's and each constraint's envs run their own worst of the two
        kernels (a learner of one rollout env, MCPMD's, runs the kernel found)."""
        return cls.reads_cost(cfg) and cfg.n_envs > 1

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
        if not self.reads_cost(ctx.cfg):
            return params, broadcast(params.xi, env_xi.shape[0]), samples
        k = jax.random.fold_in(key, 1)
        env_xi, dual_xi, steps = guarded_kernels(ctx, k, params, actor_params, lam_tilde, hp, env_xi.shape[0])
        return params, env_xi, samples + steps, dual_xi


def guarded_kernels(ctx, key, found, actor_params, lam_tilde, hp, n_envs: int):
    """``(the rollout envs' kernels [n_envs, ...], the dual's kernel, steps)`` of ``"guarded"``:
    of the kernel ``found`` and the nominal kernel, each constraint's worse for its envs (while
    ``lam~ != 0`` and ``separate``; else every env runs ``found``) and the worse by ``C`` of the
    most violated constraint for the dual."""
    xis = jnp.stack([found.xi, jnp.broadcast_to(found.xi_c, jnp.shape(found.xi))])
    _, values, steps = candidate_values(ctx, key, found, xis, actor_params, lam_tilde, hp)  # values [2, m]
    everywhere = broadcast(found.xi, n_envs)
    if not StudyLTMA.separate(ctx.cfg):
        return everywhere, worst_cost_kernel(xis, values), steps
    objective = jnp.arange(n_envs) % (1 + values.shape[1])  # 0 the reward, j + 1 constraint j
    own = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.argmax(values, axis=0).astype(jnp.int32)])
    separate = xis[own[objective]]
    return jnp.where(jnp.any(lam_tilde != 0), separate, everywhere), worst_cost_kernel(xis, values), steps
