"""``search``: train against the worst kernels the gradient worst-case search finds
(``rcmdp_jax.worst_case.search``), for boxes whose ``2^n`` corners are too many to try.

Each iteration, for the reward and for each constraint separately (the RCMDP's separate worst
cases, as ``worst-of-n``'s and ``corners``' "separate"), ``search_steps`` projected gradient steps
of the search continue from where that objective's search stood: the lowest return ``V``, each
constraint's highest ``C_j``, measured on ``adversary_episodes`` episodes of the current
(sampling) policy with common random numbers, starting at ``search.eta`` of the half-width and
keeping the best point seen. Rollout env ``b`` trains on objective ``b mod (1 + m)``'s point
(those points are the search's state between iterations, so it needs ``n_envs >= 1 + m``), the
learner weights each env's advantages to its own objective (``candidates.objective_weights``)
and the dual phase reads ``C^`` at the constraint's point (of the constraint whose point has
the highest ``C``, when there are several).

Restarts (option ``search_restarts``, default 4): a gradient search that continues from where it
stood can settle on a local worst case and never leave it (on Inventory 1-D the constraint's
worst kernel is a corner the search from the nominal kernel does not reach). So each iteration
the policy is first valued, with common random numbers, on every objective's current point and
on ``search_restarts`` corners drawn at random (all ``2^n`` when there are at most that many),
and each objective's search continues from the worst of those for it. 0 restores the plain
continued search.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax import box
from rcmdp_jax.adversary.base import Adversary, candidate_values, require_env_per_objective
from rcmdp_jax.adversary.candidates import objective_scores
from rcmdp_jax.kernel_gradients import has_density
from rcmdp_jax.plugin import Number, check_count
from rcmdp_jax.rollout import Policy
from rcmdp_jax.worst_case import SearchConfig, search


def estimator_of(env, cfg) -> str:
    """The search's gradient estimator: ``search_estimator``, where ``auto`` (the default) is the
    score function on a kernel with a density and the pathwise gradient on one without (brax's
    deterministic physics), as the robustness test's search chooses."""
    chosen = cfg.option("search_estimator")
    if chosen != "auto":
        return chosen
    return "score" if has_density(env) else "pathwise"


class GradientSearch(Adversary):
    name = "search"
    per_env = True
    options = {"search_steps": 2, "search_estimator": "auto", "search_restarts": 4}
    # the first step, a fraction of the half-width: traced (``--set search.eta=0.5``; an option
    # ``search_eta`` before, as older run.json files hold it)
    numbers = {"eta": Number(0.25, 0.0, 1.0, "the first step, a fraction of the half-width", open_low=True,
                             formerly="search_eta")}
    # a saved config (run.json) that does not name ``search_restarts`` was written before the
    # option existed, and searched without restarts: it reads so
    legacy_options = {"search_restarts": 0}
    size_fields = ("adversary_episodes",)

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_count("search_steps", cfg.option("search_steps"))
        r = cfg.option("search_restarts")
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= 256:
            raise ValueError(f"search_restarts must be an int in [0, 256] (corners tried each iteration), got {r!r}")
        if cfg.option("search_estimator") not in ("auto", "score", "pathwise"):
            raise ValueError(f"search_estimator={cfg.option('search_estimator')!r} is not allowed; choose one of: "
                             "auto (score where the kernel has a density, else pathwise), score, pathwise")  # fmt: skip

    @classmethod
    def check_env(cls, env, cfg) -> None:
        super().check_env(env, cfg)
        require_env_per_objective(env, cfg, "adversary='search' (a point for each, kept between iterations)")
        env.check_estimator(env.default_params, estimator_of(env, cfg))

    @classmethod
    def separate(cls, cfg) -> bool:
        return True

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return True

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        return (1 + cfg.option("search_restarts")) * cfg.option("adversary_episodes") * episode

    def starts(self, ctx, key, params, points, actor_params, lam_tilde, hp):
        """``(each objective's start [1 + m, *xi], steps)``: the worst for it, by the policy's value
        on the same episodes, of every objective's current point (``points``) and
        ``search_restarts`` random corners of the box."""
        r = ctx.cfg.option("search_restarts")
        k_corner, k_value = jax.random.split(key)
        n = params.xi_c.size
        if 2**n <= r:
            corners = box.corners(params.xi_c, params.kappa)
        else:
            signs = jax.random.rademacher(k_corner, (r, *params.xi_c.shape), dtype=params.xi_c.dtype)
            corners = params.xi_c + params.kappa * signs
        xis = jnp.concatenate([points, corners])
        costs, values, steps = candidate_values(ctx, k_value, params, xis, actor_params, lam_tilde, hp)
        worse = objective_scores(costs, values, lam_tilde)
        own = jnp.arange(points.shape[0])
        # an objective's own point is kept unless a candidate is strictly worse for it
        pick = jnp.where(worse.max(1) > worse[own, own], jnp.argmax(worse, 1), own)
        return xis[pick], jnp.float32(steps)

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        cfg, env = ctx.cfg, ctx.env
        m = env.num_constraints
        episodes = cfg.option("adversary_episodes")
        sc = SearchConfig(steps=cfg.option("search_steps"), episodes=episodes, eval_episodes=episodes,
                          eta0=hp.number(f"{self.name}.eta"), estimator=estimator_of(env, cfg))  # fmt: skip
        policy = Policy(ctx.actor, actor_params, dropout=cfg.act_dropout)
        start, start_steps = env_xi[: 1 + m], jnp.float32(0.0)
        if cfg.option("search_restarts"):  # (without, the keys are the plain search's: old runs resume as they ran)
            key, k_start = jax.random.split(key)
            start, start_steps = self.starts(ctx, k_start, params, start, actor_params, lam_tilde, hp)

        def one(args):  # objective j's search (0: the return, 1 + i: cost i), one copy in the program for all
            j, k, x0 = args
            # the fresh episodes' values choose between the constraints' points: with one, none are run
            xi, totals, _ = search(k, x0, env, params, policy, j, sc, hp.gamma, env.lambda_max, m > 1)
            return xi, (totals.mean(0) if m > 1 else ())

        found, values = jax.lax.map(one, (jnp.arange(1 + m), jax.random.split(key, 1 + m), start))  # [1 + m, ...]
        objective = jnp.arange(env_xi.shape[0]) % (1 + m)
        worst_c = jnp.argmax(jnp.diagonal(values[1:, 1:])) if m > 1 else 0
        dual_xi = found[1 + worst_c] if m else found[0]
        # at most: per objective (steps + 1) batches of whole episodes (each step's point and the last),
        # and with several constraints the fresh ones that value each point found
        steps = jnp.float32((1 + m) * (sc.steps + 1 + (m > 1)) * episodes * env.episode_length) + start_steps
        return params.replace(xi=found[0]), found[objective], steps, dual_xi
