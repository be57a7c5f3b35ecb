"""``cost_minimising(env, j)``: the same environment with the reward replaced by ``-c_j``,
its ``j``-th constraint-cost (docs/method.md §5, the feasibility check).

Every learner maximises the discounted return, so training on this environment (with no
constraint rule) minimises ``C_j``; a robust method that picks the kernel with the lowest
return (``corners``, ``worst-of-n``: the highest Lagrangian cost with ``lam~ = 0``) then picks
the kernel where ``C_j`` is highest. Kernel, costs, terminations and the box are the
environment's own, so a policy trained here runs unchanged on the original.
"""

from __future__ import annotations

import copy

from rcmdp_jax.envs.base import RobustEnvironment

_CLASSES: dict[type, type] = {}


def _step_env(self, key, state, action, params):
    obs, new_state, _, done, info = super(type(self), self).step_env(key, state, action, params)
    return obs, new_state, -info["costs"][self.minimised_cost], done, info


def cost_minimising(env: RobustEnvironment, j: int) -> RobustEnvironment:
    """A copy of ``env`` whose reward is ``-c_j`` (``0 <= j < env.num_constraints``)."""
    if not isinstance(env, RobustEnvironment):
        raise TypeError(f"cost_minimising needs a RobustEnvironment, got {type(env).__name__}")
    m = int(env.num_constraints)
    if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < m:
        raise ValueError(f"cost_minimising: j={j!r} must be a constraint index in 0 .. {m - 1} ({env.name} has {m})")
    base = type(env)
    if getattr(env, "minimised_cost", None) is not None:
        raise ValueError(f"{env.name} already minimises a cost; wrap the original environment")
    if base not in _CLASSES:  # one subclass per environment class, so jit caches see one type
        _CLASSES[base] = type(f"CostMinimising{base.__name__}", (base,), {"step_env": _step_env})
    new = copy.copy(env)
    new.__class__ = _CLASSES[base]
    new.minimised_cost = j
    return new
