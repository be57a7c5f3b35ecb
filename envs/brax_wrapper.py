"""Any brax environment made robust and constrained: ``envs.robustify(brax_env, ...)`` returns a
``RobustBrax``, a ``RobustEnvironment`` with the study domains' contract.

* ``xi``: named fields of the physical system (``envs.brax_adapter``): ``LINK_mass`` (kg) and
  the multipliers ``friction``, ``damping``, ``gear``; box half-widths relative or absolute as
  for gymnax (``envs.relative``, ``envs.absolute``).
* Kernel: brax's physics, deterministic (no noise, no density). The adversary's gradient is
  pathwise, through the pipeline; only the ``positional`` pipeline is differentiated here
  (``mjx`` refuses reverse mode: a ``while_loop`` in its solver). Elsewhere, and for the
  score function everywhere, ``check_estimator`` refuses with the methods that need no gradient.
* Costs ``c(state, action, next_state, sys) -> (k,)`` on brax ``State``s (``pipeline_state``,
  ``obs``, ``done``, ``metrics``; ``info["dt"]`` the control step) and the perturbed ``System``.
  ``speed_cost`` and Safety-Gymnasium's ``velocity_cost`` are built in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from rcmdp_jax.envs.brax_adapter import DIFFERENTIABLE, NO_GRADIENT_METHODS, BraxGymnax
from rcmdp_jax.envs.gymnax_inputs import cost_functions
from rcmdp_jax.envs.gymnax_wrapper import RobustGymnax

from rcmdp_jax.plugin import closest


def root_speed(state, next_state, planar: bool = True) -> jax.Array:
    """The speed of the root body over the step, as Safety-Gymnasium measures it: the change
    of its position over the control step, ``|dx| / dt`` (planar robots) or ``|(dx, dy)| / dt``."""
    d = next_state.pipeline_state.x.pos[0] - state.pipeline_state.x.pos[0]
    dt = next_state.info["dt"]
    return jnp.abs(d[0]) / dt if planar else jnp.sqrt(d[0] ** 2 + d[1] ** 2) / dt


def speed_cost(limit: float, planar: bool = True) -> Callable:
    """``speed - limit`` (a smooth speed limit: kept when the discounted sum is <= 0)."""

    def cost(state, action, next_state, sys):
        return jnp.reshape(root_speed(state, next_state, planar) - limit, (1,))

    return cost


def velocity_cost(limit: float, budget: float = 0.0, planar: bool = True):
    """Safety-Gymnasium's velocity cost, 1 when the speed is over ``limit``, with ``budget`` such
    steps per episode allowed (OmniSafe's 25 per 1000-step episode): ``envs.indicator``, made
    ``1[over] - budget / H`` by robustify."""
    from rcmdp_jax.envs.unsafe_steps import indicator

    return indicator(lambda state, action, next_state, sys: root_speed(state, next_state, planar) > limit, budget)


class RobustBrax(RobustGymnax):
    """A brax environment with an uncertainty box over its physical system (module docstring).
    Build it with ``envs.robustify``."""

    def __init__(self, env, uncertain: Mapping[str, Any], costs: Mapping[str, Callable], episode_length=None,
                 gamma: float = 0.99, lambda_max: float = 50.0, min_episode_length: int | None = None,
                 name: str | None = None):  # fmt: skip
        adapter = env if isinstance(env, BraxGymnax) else BraxGymnax(env, episode_length)
        read = adapter.fields_read()
        for field in uncertain:
            if field not in adapter.nominal:
                raise ValueError(f"uncertain: {adapter.name} has no field {field!r}{closest(field, adapter.nominal)}; "
                                 f"fields: {', '.join(adapter.nominal)}")  # fmt: skip
            if field not in read:
                raise ValueError(f"uncertain: the {adapter.backend} pipeline does not read {field!r}; fields: "
                                 f"{', '.join(read)} (or backend generalized)")  # fmt: skip
        self.adapter = adapter
        super().__init__(adapter, adapter.default_params, uncertain, costs, noise=0.0, gamma=gamma,
                         lambda_max=lambda_max, min_episode_length=min_episode_length,
                         name=name or f"Robust{type(adapter.brax).__name__}")  # fmt: skip

    @property
    def backend(self) -> str:
        return self.adapter.backend

    def gymnax_step(self, state, action, inner):
        """brax's own step under the perturbed system, gradients kept."""
        return self.adapter.brax_step(state, action, inner)

    def _cost_args(self, state, action, next_state, inner):
        """brax's own ``State`` before and after the step, the clipped action, the system."""
        sys = self.adapter.system(inner)
        before, after = self.adapter.to_brax(state, sys), self.adapter.to_brax(next_state, sys)
        return before, jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0), after, sys

    def check_estimator(self, params, estimator: str) -> None:
        """brax's physics has no density (no score function); the pathwise gradient runs on the
        differentiable pipelines only."""
        if estimator == "score":
            raise ValueError(f"{self.name}: brax's physics is deterministic, so the score-function gradient has no "
                             f"density; use ltma_estimator='pathwise' (backend {', '.join(DIFFERENTIABLE)}) or a "
                             f"method that needs no gradient: {NO_GRADIENT_METHODS}")  # fmt: skip
        if estimator == "pathwise" and self.backend not in DIFFERENTIABLE:
            raise ValueError(f"{self.name}: the {self.backend} pipeline gives no reverse-mode gradient for the pathwise "
                             f"adversary (ltma-norm, ltma with ltma_estimator='pathwise'); use backend "
                             f"{', '.join(DIFFERENTIABLE)} or a method that needs no gradient: {NO_GRADIENT_METHODS}")  # fmt: skip

    def brax_state(self, state, params=None):
        """The brax ``State`` of a ``RobustState`` (what the costs see)."""
        params = self.default_params if params is None else params
        inner = self.apply_xi(params)
        return self.adapter.to_brax(self.unflatten(state.s, state.time), self.adapter.system(inner))


def robustify_brax(env, uncertain: Mapping[str, Any], costs: Mapping[str, Callable] | Sequence,
                   episode_length: int | None = None, **options) -> RobustBrax:  # fmt: skip
    """``envs.robustify`` for a brax environment (``brax.envs.get_environment(NAME, backend=...)``
    or ``brax.envs.create``): ``uncertain`` over the fields of ``brax_adapter``, ``costs`` on brax
    ``State``s, ``episode_length`` (default: the EpisodeWrapper's, else 1000). ``options``:
    ``gamma``, ``lambda_max``, ``min_episode_length``, ``name``; ``noise`` must be 0 or absent."""
    if not isinstance(uncertain, Mapping):
        raise TypeError(f"uncertain must be a dict {{field: half_width}}, got {type(uncertain).__name__}")
    costs = cost_functions(costs)
    noise = options.pop("noise", None)
    if noise is not None and np.any(np.asarray(noise) != 0):
        raise ValueError("noise: a brax kernel is brax's deterministic physics; leave noise out (or 0)")
    for key in ("derive", "params"):
        if options.pop(key, None) is not None:
            raise ValueError(f"{key}: not used for a brax environment (its system is the nominal kernel)")
    return RobustBrax(env, uncertain, costs, episode_length, **options)


__all__ = ["RobustBrax", "robustify_brax", "root_speed", "speed_cost", "velocity_cost"]
