"""What the methods that try candidate kernels share (``worst-of-n``, ``corners``): the
policy's Lagrangian cost and constraint values on each candidate, and their option
``dual_reading`` — where the dual phase reads the constraint values ``C^``:

* ``"picked"``: at the kernel the method trains on, picked by the *Lagrangian* cost
  ``lam~ . C - V`` (mostly the return while ``lam~`` is small);
* ``"worst_cost"``: at the constraint's own worst candidate, the one with the highest ``C``
  (of its most violated constraint), as risk-averse constraints read it.

and their option ``worst_cases`` — which worst case the learner trains against:

* ``"lagrangian"``: one kernel for everything, the worst by the Lagrangian cost;
* ``"separate"``: the RCMDP's separate worst cases (docs/method.md §2c): the reward's worst
  candidate (lowest ``V``) for the return and each constraint's own (highest ``C_i``) for its
  cost. Rollout env ``b`` serves objective ``b mod (1 + m)`` (0 the reward, ``i`` constraint
  ``i``) on that objective's worst candidates, and the learner weights each env's advantages
  to its own objective (``objective_weights``); the dual phase reads ``C^`` at the
  constraint's worst candidate (``dual_reading`` is then ``worst_cost``). While ``lam~ = 0``
  (an unconstrained algorithm, or a constraint kept with room) the costs are not in the
  learner's signal, and every env runs the reward's worst candidates, as with "lagrangian".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, candidate_values, require_env_per_objective
from rcmdp_jax.plugin import check_choice

DUAL_READINGS = ("picked", "worst_cost")
WORST_CASES = ("lagrangian", "separate")


class CandidateMethod(Adversary):
    """A method that runs the policy on candidate kernels and trains on the worst by the
    Lagrangian cost; with ``dual_reading="worst_cost"`` its ``step`` also returns the
    candidate where ``C`` is highest, for the dual phase (``reads_cost``)."""

    per_env = True  # "separate": the reward's and each constraint's envs run their own worst kernels
    options = {"dual_reading": "picked", "worst_cases": "separate"}
    # a saved config (run.json) that does not name ``worst_cases`` was written before the option
    # existed, and trained on the Lagrangian worst: it reads so
    legacy_options = {"worst_cases": "lagrangian"}

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_choice("dual_reading", cfg.option("dual_reading"), DUAL_READINGS)
        check_choice("worst_cases", cfg.option("worst_cases"), WORST_CASES)

    @classmethod
    def check_env(cls, env, cfg) -> None:
        super().check_env(env, cfg)
        if cls.separate(cfg):
            require_env_per_objective(env, cfg, "worst_cases='separate'", "worst_cases='lagrangian'")

    @classmethod
    def separate(cls, cfg) -> bool:
        """Whether the learner trains against the separate worst cases (``worst_cases``; a learner
        of one rollout env, MCPMD's, trains on the Lagrangian worst)."""
        return cfg.option("worst_cases") == "separate" and cfg.n_envs > 1

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return cfg.option("dual_reading") == "worst_cost" or cls.separate(cfg)

    def evaluate(self, ctx, key, params, xis, actor_params, lam_tilde, hp):
        """``(Lagrangian costs [K], the dual phase's kernel or None, steps, scores [1 + m, K])``
        on the candidates ``xis``: the scores rank them per objective, higher worse (``-V``, then
        each ``C_i``)."""
        costs, values, steps = candidate_values(ctx, key, params, xis, actor_params, lam_tilde, hp)
        scores = objective_scores(costs, values, lam_tilde)
        return costs, (worst_cost_kernel(xis, values) if self.reads_cost(ctx.cfg) else None), steps, scores

    def env_kernels(self, ctx, costs, scores, xis, lam_tilde, k: int, n_envs: int):
        """``(the method's own kernel, the rollout envs' kernels [n_envs, ...])``: the worst by the
        Lagrangian cost for every env (``worst_kernels``); or ("separate", where ``lam~ != 0``)
        env ``b`` cycling over the ``k`` worst of objective ``b mod (1 + m)``, and the reward's
        worst as the method's own kernel."""
        lagrangian = worst_kernels(costs, xis, k, n_envs)
        if not self.separate(ctx.cfg):
            return lagrangian
        _, worst = jax.lax.top_k(scores, k)  # [1 + m, k]
        b = jnp.arange(n_envs)
        separate = xis[worst[0, 0]], xis[worst[b % scores.shape[0], (b // scores.shape[0]) % k]]
        on = jnp.any(lam_tilde != 0)
        return tuple(jnp.where(on, s, g) for s, g in zip(separate, lagrangian))


def objective_scores(costs: jax.Array, values: jax.Array, lam_tilde: jax.Array) -> jax.Array:
    """``[1 + m, K]``: how bad each candidate is for each objective, higher worse: ``-V``
    (``= L - lam~ . C`` from the Lagrangian costs ``[K]``), then each ``C_i`` (``values [K, m]``)."""
    return jnp.concatenate([(costs - values @ lam_tilde)[None], values.T])


def worst_kernels(costs: jax.Array, xis: jax.Array, k: int, n_envs: int) -> tuple[jax.Array, jax.Array]:
    """``(the worst kernel, [n_envs] kernels cycling over the k worst)`` by ``costs`` (higher is worse)."""
    _, worst = jax.lax.top_k(costs, k)
    return xis[worst[0]], xis[worst[jnp.arange(n_envs) % k]]


def objective_weights(n_envs: int, m: int) -> jax.Array:
    """``[n_envs, 1 + m]``: env ``b`` serves objective ``b mod (1 + m)`` alone, weighted by the
    share of envs that serve it, so each objective's advantages keep their scale."""
    objective = jnp.arange(n_envs) % (1 + m)
    mine = (objective[:, None] == jnp.arange(1 + m)[None]).astype(jnp.float32)
    return mine * (n_envs / jnp.maximum(mine.sum(0, keepdims=True), 1.0))


def worst_cost_kernel(xis: jax.Array, values: jax.Array) -> jax.Array:
    """The candidate whose highest constraint value is highest: ``xis [K, ...]``, ``values [K, m]``."""
    return xis[jnp.argmax(values.max(-1))]


def with_dual(out: tuple, dual_xi) -> tuple:
    """A method's ``step`` result, with the dual phase's kernel when it reads one."""
    return out if dual_xi is None else (*out, dual_xi)
