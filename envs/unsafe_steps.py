"""Costs in the safe-RL field's terms: 1 when the state is unsafe, else 0, with a budget of
unsafe steps per episode (``envs.indicator``; ``--costs 'FIELD>LIMIT:BUDGET'``).

The library keeps a constraint when its *discounted* value ``C = E[Σ_t γ^t c_t]`` is at most 0
(docs/method.md, "What C is"). An indicator with budget ``B`` is the per-step cost
``c_t = 1[unsafe_t] − b`` with ``b = B (1 − γ) / (1 − γ^H)``, so that over a full episode of
``H`` steps ``Σ_t γ^t b = B``: ``C`` is the expected *discounted* number of unsafe steps per
episode minus ``B``, and the constraint is kept when at most ``B`` (discounted) steps are
unsafe — Safety-Gymnasium's ``E[Σ_t 1[unsafe]] ≤ B`` as ``γ → 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp


def budget_per_step(budget: float, gamma: float, episode_length: int) -> float:
    """``b`` with ``Σ_{t < H} γ^t b = budget`` (``budget / H`` when ``γ = 1``)."""
    if gamma >= 1.0:
        return budget / episode_length
    return budget * (1.0 - gamma) / (1.0 - gamma**episode_length)


class Indicator:
    """``unsafe(state, action, next_state, params) -> bool`` (a scalar or ``(k,)``) as a cost
    of 1 per unsafe step, with ``budget`` unsafe steps per episode allowed (default 0: never
    unsafe). ``robustify`` turns it into the per-step cost with its own ``γ`` and episode
    length (``per_step``)."""

    def __init__(self, unsafe: Callable, budget: float = 0.0):
        if not callable(unsafe):
            raise TypeError(f"indicator: unsafe must be a function (state, action, next_state, params) -> bool, got "
                            f"{type(unsafe).__name__}")  # fmt: skip
        ok = isinstance(budget, (int, float)) and not isinstance(budget, bool)
        if not (ok and math.isfinite(budget) and budget >= 0):
            raise ValueError(f"indicator: budget (unsafe steps per episode) must be a finite number >= 0, got {budget!r}")
        self.unsafe, self.budget = unsafe, float(budget)
        self.__name__ = getattr(unsafe, "__name__", "unsafe")

    def per_step(self, gamma: float, episode_length: int) -> Callable:
        b = budget_per_step(self.budget, gamma, episode_length)

        def cost(state, action, next_state, params):
            flag = jnp.asarray(self.unsafe(state, action, next_state, params))
            return jnp.atleast_1d(flag.astype(jnp.float32)) - b

        cost.__name__ = self.__name__
        return cost

    def __call__(self, state, action, next_state, params):  # outside robustify: no budget shift known
        raise TypeError("an envs.indicator cost is made per step by envs.robustify (it needs gamma and the episode "
                        "length); pass it in robustify's costs")  # fmt: skip


def indicator(unsafe: Callable, budget: float = 0.0) -> Indicator:
    """A cost of 1 per unsafe step with ``budget`` unsafe steps per episode (see the module)."""
    return Indicator(unsafe, budget)


def finalise(costs: dict, gamma: float, episode_length: int) -> dict:
    """``costs`` with each ``Indicator`` made its per-step cost."""
    return {k: (v.per_step(gamma, episode_length) if isinstance(v, Indicator) else v) for k, v in costs.items()}
