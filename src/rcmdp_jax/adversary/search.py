"""``search``: train against the worst kernels the gradient worst-case search finds
(``rcmdp_jax.worst_case.search``), for boxes whose ``2^n`` corners are too many to try.

Each iteration, for the reward and for each constraint separately (the RCMDP's separate worst
cases, as ``worst-of-n``'s and ``corners``' "separate"), ``search_steps`` projected gradient steps
of the search continue from where that objective's search stood: the lowest return ``V``, each
constraint's highest ``C_j``, measured on ``adversary_episodes`` episodes of the current
(sampling) policy with common random numbers, starting at ``search_eta`` of the half-width and
keeping the best point seen. Rollout env ``b`` trains on objective ``b mod (1 + m)``'s point
(those points are the search's state between iterations, so it needs ``n_envs >= 1 + m``), the
learner weights each env's advantages to its own objective (``candidates.objective_weights``)
and the dual phase reads ``C^`` at the constraint's point (of the constraint whose point has
the highest ``C``, when there are several).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary
from rcmdp_jax.plugin import check_count
from rcmdp_jax.rollout import Policy
from rcmdp_jax.worst_case import SearchConfig, search


class GradientSearch(Adversary):
    name = "search"
    per_env = True
    options = {"search_steps": 2, "search_eta": 0.25, "search_estimator": "score"}
    size_fields = ("adversary_episodes",)

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_count("search_steps", cfg.option("search_steps"))
        eta = cfg.option("search_eta")
        if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0.0 < eta <= 1.0:
            raise ValueError(f"search_eta must be in (0, 1] (the first step, a fraction of the half-width), got {eta!r}")
        if cfg.option("search_estimator") not in ("score", "pathwise"):
            raise ValueError(f"search_estimator={cfg.option('search_estimator')!r} is not allowed; choose one of: "
                             "score, pathwise")  # fmt: skip

    @classmethod
    def check_env(cls, env, cfg) -> None:
        super().check_env(env, cfg)
        if cfg.n_envs < 1 + env.num_constraints:
            raise ValueError(f"adversary='search' keeps a point for the reward and each of the {env.num_constraints} "
                             f"constraint(s) in rollout envs of their own: n_envs={cfg.n_envs} must be at least "
                             f"{1 + env.num_constraints}")  # fmt: skip
        env.check_estimator(env.default_params, cfg.option("search_estimator"))

    @classmethod
    def separate(cls, cfg) -> bool:
        return True

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return True

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        return cfg.option("adversary_episodes") * episode

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        cfg, env = ctx.cfg, ctx.env
        m = env.num_constraints
        episodes = cfg.option("adversary_episodes")
        sc = SearchConfig(steps=cfg.option("search_steps"), episodes=episodes, eval_episodes=episodes,
                          eta0=float(cfg.option("search_eta")), estimator=cfg.option("search_estimator"))  # fmt: skip
        policy = Policy(ctx.actor, actor_params, dropout=cfg.act_dropout)
        names = ("return",) + tuple(f"cost{j}" for j in range(m))
        found, values = [], []
        for j, (name, k) in enumerate(zip(names, jax.random.split(key, 1 + m))):
            xi, totals, _ = search(k, env_xi[j], env, params, policy, name, sc, hp.gamma, env.lambda_max)
            found.append(xi)
            values.append(totals.mean(0))
        found = jnp.stack(found)  # [1 + m, *xi]
        objective = jnp.arange(env_xi.shape[0]) % (1 + m)
        worst_c = jnp.argmax(jnp.stack([values[1 + j][1 + j] for j in range(m)])) if m else 0
        dual_xi = found[1 + worst_c] if m else found[0]
        # at most: per objective (steps + 1) batches of whole episodes and the fresh ones that value the point
        steps = jnp.float32((1 + m) * (sc.steps + 2) * episodes * env.episode_length)
        return params.replace(xi=found[0]), found[objective], steps, dual_xi
