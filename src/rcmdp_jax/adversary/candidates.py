"""What the methods that try candidate kernels share (``worst-of-n``, ``corners``): the
policy's Lagrangian cost and constraint values on each candidate, and their option
``dual_reading`` — where the dual phase reads the constraint values ``C^``:

* ``"picked"``: at the kernel the method trains on, picked by the *Lagrangian* cost
  ``lam~ . C - V`` (mostly the return while ``lam~`` is small);
* ``"worst_cost"``: at the constraint's own worst candidate, the one with the highest ``C``
  (of its most violated constraint), as risk-averse constraints read it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary.base import Adversary, candidate_values
from rcmdp_jax.plugin import check_choice

DUAL_READINGS = ("picked", "worst_cost")


class CandidateMethod(Adversary):
    """A method that runs the policy on candidate kernels and trains on the worst by the
    Lagrangian cost; with ``dual_reading="worst_cost"`` its ``step`` also returns the
    candidate where ``C`` is highest, for the dual phase (``reads_cost``)."""

    options = {"dual_reading": "picked"}

    @classmethod
    def check_options(cls, cfg) -> None:
        super().check_options(cfg)
        check_choice("dual_reading", cfg.option("dual_reading"), DUAL_READINGS)

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        return cfg.option("dual_reading") == "worst_cost"

    def evaluate(self, ctx, key, params, xis, actor_params, lam_tilde, hp):
        """``(Lagrangian costs [K], the dual phase's kernel or None, steps)`` on the candidates ``xis``."""
        costs, values, steps = candidate_values(ctx, key, params, xis, actor_params, lam_tilde, hp)
        return costs, (worst_cost_kernel(xis, values) if self.reads_cost(ctx.cfg) else None), steps


def worst_cost_kernel(xis: jax.Array, values: jax.Array) -> jax.Array:
    """The candidate whose highest constraint value is highest: ``xis [K, ...]``, ``values [K, m]``."""
    return xis[jnp.argmax(values.max(-1))]


def with_dual(out: tuple, dual_xi) -> tuple:
    """A method's ``step`` result, with the dual phase's kernel when it reads one."""
    return out if dual_xi is None else (*out, dual_xi)
