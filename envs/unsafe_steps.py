"""Costs in the safe-RL field's terms: 1 when the state is unsafe, else 0, with a budget of
unsafe steps per episode (``envs.indicator``; ``--costs 'FIELD>LIMIT:BUDGET'``).

The library keeps a constraint when its *discounted* value ``C = E[Σ_t γ^t c_t]`` is at most 0
(docs/method.md, "What C is"). An indicator with a budget of ``B`` unsafe steps per episode of
``H`` steps is the per-step cost ``c_t = 1[unsafe_t] − B/H``: kept when the *discounted share*
of unsafe steps is at most ``B/H`` — Safety-Gymnasium's ``E[Σ_t 1[unsafe_t]] ≤ B`` for a policy
unsafe at a steady rate (OmniSafe's 25 per 1000-step episode: a share of 0.025), with late
steps weighing ``γ^t`` less than early ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp


def budget_per_step(budget: float, episode_length: int) -> float:
    """``b = budget / H``: the share of an episode's ``H`` steps that may be unsafe."""
    return budget / episode_length


class Indicator:
    """``unsafe(state, action, next_state, params) -> bool`` (a scalar or ``(k,)``) as a cost
    of 1 per unsafe step, with ``budget`` unsafe steps per episode allowed (default 0: never
    unsafe). ``robustify`` turns it into the per-step cost with its episode length (``per_step``)."""

    def __init__(self, unsafe: Callable, budget: float = 0.0):
        if not callable(unsafe):
            raise TypeError(f"indicator: unsafe must be a function (state, action, next_state, params) -> bool, got "
                            f"{type(unsafe).__name__}")  # fmt: skip
        ok = isinstance(budget, (int, float)) and not isinstance(budget, bool)
        if not (ok and math.isfinite(budget) and budget >= 0):
            raise ValueError(f"indicator: budget (unsafe steps per episode) must be a finite number >= 0, got {budget!r}")
        self.unsafe, self.budget = unsafe, float(budget)
        self.__name__ = getattr(unsafe, "__name__", "unsafe")

    def per_step(self, episode_length: int) -> Callable:
        if self.budget >= episode_length:  # 1[unsafe] - B/H <= 0 on every step: it can never bind
            raise ValueError(f"costs: a budget of {self.budget:g} unsafe steps per episode is at least the episode "
                             f"length H = {episode_length}, so the constraint can never bind; give a budget below "
                             f"{episode_length}")  # fmt: skip
        b = budget_per_step(self.budget, episode_length)

        def cost(state, action, next_state, params):
            flag = jnp.asarray(self.unsafe(state, action, next_state, params))
            return jnp.atleast_1d(flag.astype(jnp.float32)) - b

        cost.__name__ = self.__name__
        return cost

    def __call__(self, state, action, next_state, params):  # outside robustify: no budget shift known
        raise TypeError("an envs.indicator cost is made per step by envs.robustify (it needs the episode length); "
                        "pass it in robustify's costs")  # fmt: skip


def indicator(unsafe: Callable, budget: float = 0.0) -> Indicator:
    """A cost of 1 per unsafe step with ``budget`` unsafe steps per episode (see the module)."""
    return Indicator(unsafe, budget)


def finalise(costs: dict, episode_length: int) -> dict:
    """``costs`` with each ``Indicator`` made its per-step cost."""
    return {k: (v.per_step(episode_length) if isinstance(v, Indicator) else v) for k, v in costs.items()}
