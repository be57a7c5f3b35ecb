"""``worst-of-n``: EPOpt's idea. Draw ``adversary_candidates`` kernels uniformly from the
box, run the current policy on each (``adversary_episodes`` episodes, ``Adversary``'s
option), and train on the worst ``adversary_fraction`` of them by the Lagrangian cost
(both its options): rollout env ``i`` gets the ``i mod k``-th worst of the ``k`` worst;
the adversary's own kernel is the worst."""

from __future__ import annotations

import math

import jax

from rcmdp_jax.adversary.base import uniform_kernels
from rcmdp_jax.adversary.candidates import CandidateMethod, with_dual, worst_kernels  # noqa: F401  (its home once)
from rcmdp_jax.plugin import Number, check_count, check_kind


class WorstOfN(CandidateMethod):
    name = "worst-of-n"
    per_env = True
    options = {
        "adversary_candidates": 16,  # kernels drawn per iteration
        "adversary_fraction": 0.25,  # the worst share of them trained on
    }
    size_fields = ("adversary_candidates", "adversary_episodes")

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_count("adversary_candidates", cfg.option("adversary_candidates"))
        share = Number(0.25, 0.0, 1.0, open_low=True)  # the worst share of the candidates
        check_kind("adversary_fraction", cfg.option("adversary_fraction"), share)

    @classmethod
    def lane_bytes(cls, cfg, record: float, episode: float) -> float:
        """Every candidate's episodes at once."""
        return cfg.option("adversary_candidates") * cfg.option("adversary_episodes") * episode

    @classmethod
    def counts(cls, cfg, episode_length: int) -> tuple[tuple[str, str, int], ...]:
        """Its steps an iteration, at most ``adversary_candidates x adversary_episodes x episode_length``."""
        n = cfg.option("adversary_candidates") * cfg.option("adversary_episodes") * episode_length
        return (("adversary_candidates", "adversary_candidates x adversary_episodes x episode_length worst-of-n steps",
                 n),)  # fmt: skip

    def step(self, ctx, key, params, env_xi, actor_params, lam_tilde, hp):
        n = ctx.cfg.option("adversary_candidates")
        k_draw, k_run = jax.random.split(key)
        xis = uniform_kernels(k_draw, params, n)
        costs, dual_xi, steps, scores = self.evaluate(ctx, k_run, params, xis, actor_params, lam_tilde, hp)
        k = max(1, math.ceil(ctx.cfg.option("adversary_fraction") * n))
        worst, env_xi = self.env_kernels(ctx, costs, scores, xis, lam_tilde, k, env_xi.shape[0])
        return with_dual((params.replace(xi=worst), env_xi, steps), dual_xi)
