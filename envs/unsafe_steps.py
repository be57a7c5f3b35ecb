"""Costs in the safe-RL field's terms: 1 when the state is unsafe, else 0, with a budget of
unsafe steps per episode (``envs.indicator``; ``--costs 'FIELD>LIMIT:BUDGET'``).

An indicator with a budget of ``B`` unsafe steps per episode of ``H`` steps is the per-step
cost ``c_t = 1[unsafe_t] − B/H`` with its own cost discount ``gamma_c`` (default 1): its
constraint value ``C = E[Σ_t gamma_c^t c_t]`` is, with ``gamma_c = 1`` and a full episode,
``E[EpCost] − B`` — Safety-Gymnasium's and OmniSafe's ``E[Σ_t 1[unsafe_t]] ≤ B`` (25 per
1000-step episode); ``gamma_c = None`` discounts it by the training ``γ`` (the discounted
share of unsafe steps at most ``B/H``, docs/method.md, "What C is").

A cost function of one's own takes a cost discount the same way: ``fn.gamma_c = 1.0``
(``with_gamma_c``); without one it is discounted by ``γ``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np


def budget_per_step(budget: float, episode_length: int) -> float:
    """``b = budget / H``: the share of an episode's ``H`` steps that may be unsafe."""
    return budget / episode_length


def check_gamma_c(gamma_c, where: str = "gamma_c"):
    """``gamma_c``: None (the training discount) or a number in (0, 1]; else ``ValueError``."""
    if gamma_c is None:
        return None
    ok = isinstance(gamma_c, (int, float)) and not isinstance(gamma_c, bool)
    if not (ok and 0.0 < gamma_c <= 1.0 and float(np.float32(gamma_c)) > 0.0):  # > 0 in float32, as it is used
        raise ValueError(f"{where} (the cost discount) must be a number in (0, 1] or None (the training "
                         f"discount gamma), got {gamma_c!r}")  # fmt: skip
    return float(gamma_c)


def with_gamma_c(cost: Callable, gamma_c: float | None) -> Callable:
    """``cost`` (a function ``c(state, action, next_state, params)``) with its own cost discount:
    ``gamma_c = 1`` keeps the undiscounted episode sum of the cost at most 0."""
    cost.gamma_c = check_gamma_c(gamma_c)
    return cost


class Indicator:
    """``unsafe(state, action, next_state, params) -> bool`` (a scalar or ``(k,)``) as a cost
    of 1 per unsafe step, with ``budget`` unsafe steps per episode allowed (default 0: never
    unsafe) and the cost discount ``gamma_c`` (default 1: the episode count; None: the
    training discount). ``robustify`` turns it into the per-step cost with its episode length
    (``per_step``)."""

    def __init__(self, unsafe: Callable, budget: float = 0.0, gamma_c: float | None = 1.0):
        if not callable(unsafe):
            raise TypeError(f"indicator: unsafe must be a function (state, action, next_state, params) -> bool, got "
                            f"{type(unsafe).__name__}")  # fmt: skip
        ok = isinstance(budget, (int, float)) and not isinstance(budget, bool)
        if not (ok and math.isfinite(budget) and budget >= 0):
            raise ValueError(f"indicator: budget (unsafe steps per episode) must be a finite number >= 0, got {budget!r}")
        self.unsafe, self.budget, self.gamma_c = unsafe, float(budget), check_gamma_c(gamma_c, "indicator: gamma_c")
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
        cost.gamma_c, cost.offset = self.gamma_c, b  # read by robustify: the discount, EpCost's shift
        cost.unsafe = self.unsafe  # robustify subtracts b itself, from its parameters (``EnvParams.cost_shares``)
        return cost

    def __call__(self, state, action, next_state, params):  # outside robustify: no budget shift known
        raise TypeError("an envs.indicator cost is made per step by envs.robustify (it needs the episode length); "
                        "pass it in robustify's costs")  # fmt: skip


def indicator(unsafe: Callable, budget: float = 0.0, gamma_c: float | None = 1.0) -> Indicator:
    """A cost of 1 per unsafe step with ``budget`` unsafe steps per episode and the cost
    discount ``gamma_c`` (see the module)."""
    return Indicator(unsafe, budget, gamma_c)


def finalise(costs: dict, episode_length: int) -> dict:
    """``costs`` with each ``Indicator`` made its per-step cost."""
    return {k: (v.per_step(episode_length) if isinstance(v, Indicator) else v) for k, v in costs.items()}


def cost_terms(fn: Callable) -> tuple[float | None, float]:
    """``(gamma_c, b)`` of a finalised cost function: its cost discount (None: the training
    discount) and the per-step share it subtracts (an indicator's ``B/H``, else 0)."""
    where = f"costs[{getattr(fn, '__name__', 'cost')!r}].gamma_c"
    return check_gamma_c(getattr(fn, "gamma_c", None), where), float(getattr(fn, "offset", 0.0))
