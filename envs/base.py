"""The extra surface every robust environment shares.

A robust environment is a gymnax ``Environment`` whose transition kernel is a
*parametric distribution*: ``s' ~ P_xi(. | s, a)``.  The kernel parameter ``xi``
lives in ``EnvParams`` next to its nominal value ``xi_c`` and the box
half-widths ``kappa`` of the uncertainty set ``U = {xi : |xi - xi_c| <= kappa}``.

Subclasses write four small pure functions -- ``next_state_distribution``,
``reward``, ``constraint_costs`` and ``is_terminated_vec`` -- plus ``reset_env``;
this base owns sampling (``step_env`` samples from exactly the distribution the
adversary differentiates), the box projection and the test kernels of docs/method.md §1
(their formulas: ``rcmdp_jax.box``).
"""

from __future__ import annotations

from typing import Any

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from rcmdp_jax import box


@struct.dataclass
class RobustState(environment.EnvState):
    """State of every robust env: the state vector ``s`` and the step counter."""

    s: jax.Array
    time: jax.Array


class RobustEnvironment(environment.Environment):
    """Base class: a gymnax env with a differentiable parametric kernel.

    Class attributes a subclass sets:
      ``num_constraints`` (m), ``gamma``, ``lambda_max``, ``episode_length``, ``min_episode_length``,
      ``state_dim``, ``discrete`` (bool), ``action_dim`` (number of discrete
      actions, or the continuous action dimension).
    """

    num_constraints: int = 1
    gamma: float = 0.99
    lambda_max: float = 50.0
    episode_length: int = 100
    # a lower bound on any episode's length under every kernel of the box (no early
    # termination: the episode length); sizes MCPMD's iteration slots
    min_episode_length: int = 100
    state_dim: int = 1
    discrete: bool = True
    action_dim: int = 2
    # per constraint: its cost discount gamma_c (NaN: the training discount gamma), and the
    # per-step share b its cost subtracts (an indicator's B/H: the episode cost EpCost adds it
    # back); None: every constraint discounted by gamma, nothing subtracted
    cost_gammas: tuple[float, ...] | None = None
    cost_offsets: tuple[float, ...] | None = None

    # ------------------------------------------------------------------ model
    def next_state_distribution(self, params: Any, s: jax.Array, action: jax.Array) -> distrax.Distribution:
        """Distribution of the next state vector; event shape ``(state_dim,)``."""
        raise NotImplementedError

    def reward(self, params: Any, s: jax.Array, action: jax.Array, s_next: jax.Array) -> jax.Array:
        raise NotImplementedError

    def constraint_costs(self, params: Any, s: jax.Array, action: jax.Array, s_next: jax.Array) -> jax.Array:
        """Constraint-costs ``c(s, a)`` of shape ``(m,)``; a constraint holds when its
        discounted sum is <= 0."""
        raise NotImplementedError

    def kernel_saturated(self, params: Any, s: jax.Array, action: jax.Array) -> jax.Array:
        """True when the kernel's mean at ``(s, a)`` reached a state bound (Inventory's
        clipped mean, see ``envs.inventory``); environments without a bound: False."""
        return jnp.zeros((), dtype=bool)

    def is_terminated_vec(self, params: Any, s_next: jax.Array) -> jax.Array:
        """True termination (not time-limit truncation) of the next state."""
        return jnp.zeros((), dtype=bool)

    def initial_state(self, key: jax.Array, params: Any) -> jax.Array:
        raise NotImplementedError

    # -------------------------------------------------------- gymnax contract
    def step(self, key, state, action, params=None):
        """gymnax ``step`` (auto-reset, ``terminated``/``truncated``), after checking
        the kernel-parameter shapes so a wrong ``xi`` fails before tracing."""
        params = self.default_params if params is None else params
        self.validate_params(params)
        self.check_action(action)
        return super().step(key, state, action, params)

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        self.validate_params(params)
        return super().reset(key, params)

    def reset_env(self, key: jax.Array, params: Any) -> tuple[jax.Array, RobustState]:
        s = self.initial_state(key, params)
        state = RobustState(s=s, time=jnp.zeros((), dtype=jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state, action, params):
        """Sample ``s'`` from ``next_state_distribution`` and score the transition. Under
        ``jit`` an action outside the action space, or a non-finite state or kernel, gives
        a NaN next state, reward and costs and ends the episode: visible (the divergence
        check catches it), never a valid-looking step."""
        s, a = state.s, jnp.asarray(action)
        s_next = self.next_state_distribution(params, s, a).sample(seed=key)
        bad = jnp.logical_not(self.action_valid(a) & jnp.all(jnp.isfinite(s_next)))
        s_next = jnp.where(bad, jnp.nan, s_next)
        reward = jnp.where(bad, jnp.nan, self.reward(params, s, a, s_next))
        costs = jnp.where(bad, jnp.nan, self.constraint_costs(params, s, a, s_next))
        new_state = RobustState(s=s_next, time=state.time + 1)
        terminated = self.is_terminated_vec(params, s_next) | bad
        info = {"costs": costs, "saturated": self.kernel_saturated(params, s, a)}
        return self.get_obs(new_state), new_state, reward, terminated, info

    def action_valid(self, action: jax.Array) -> jax.Array:
        """Whether ``action`` is in the action space (traced): a whole number in
        ``[0, action_dim)`` for discrete actions; finite entries for continuous ones
        (clipped to the box by the dynamics)."""
        a = jnp.asarray(action)
        if self.discrete:
            return (a >= 0) & (a < self.action_dim) & (a == jnp.floor(a))
        return jnp.all(jnp.isfinite(a))

    def check_action(self, action) -> None:
        """Outside ``jit``: ``ValueError`` naming the action and the allowed ones."""
        if isinstance(action, jax.core.Tracer):
            return
        a = np.asarray(action)
        if self.discrete:
            allowed = f"an integer in 0 .. {self.action_dim - 1}"
        else:
            allowed = f"a finite vector of shape ({self.action_dim},)"
        if a.dtype.kind not in "iuf":  # a string, None, a bool: not a number of the action space
            ok = False
        elif self.discrete:
            ok = a.shape == () and np.isfinite(a) and a == np.floor(a) and 0 <= a < self.action_dim
        else:
            ok = a.shape == (self.action_dim,) and bool(np.all(np.isfinite(a)))
        if not ok:
            shown = a.tolist() if a.dtype.kind in "biuf" else action
            raise ValueError(f"{self.name}: action {shown!r} is not in the action space; expected {allowed}")

    def get_obs(self, state: RobustState, params=None, key=None) -> jax.Array:
        return state.s

    def is_terminated(self, state: RobustState, params: Any) -> jax.Array:
        return self.is_terminated_vec(params, state.s)

    @property
    def num_actions(self) -> int:
        return self.action_dim

    @property
    def obs_dim(self) -> int:
        """The observation's length (the state vector itself unless an env says otherwise)."""
        return self.state_dim

    def check_estimator(self, params: Any, estimator: str) -> None:
        """Raise ``ValueError`` if LTMA's ``estimator`` cannot run on this kernel (every
        kernel here has a density and a reparameterised sample)."""

    # ------------------------------------------------------- adversary hooks
    def transition_log_prob(
        self, xi: jax.Array, params: Any, s: jax.Array, action: jax.Array, s_next: jax.Array
    ) -> jax.Array:
        """``log P_xi(s_next | s, a)`` as a function of ``xi`` (differentiable)."""
        return self.next_state_distribution(params.replace(xi=xi), s, action).log_prob(s_next)

    def project(self, params: Any) -> Any:
        """``params`` with ``xi`` projected onto the uncertainty box (``box.project``)."""
        return params.replace(xi=box.project(params.xi, params.xi_c, params.kappa))

    def validate_params(self, params: Any) -> None:
        """Raise ``ValueError`` if ``xi``/``xi_c``/``kappa`` do not have this env's shape.

        Call it on concrete (not traced) params before compiling.  Leading batch
        axes are allowed; the trailing axes must equal ``xi_c``'s default shape.
        """
        want = tuple(np.shape(self.default_params.xi_c))
        for field in ("xi", "xi_c", "kappa"):
            shape = tuple(np.shape(getattr(params, field)))
            if shape[len(shape) - len(want) :] != want or len(shape) < len(want):
                raise ValueError(
                    f"{self.name}: EnvParams.{field} has shape {shape}; expected {want} "
                    f"(optionally with leading batch axes)"
                )
        if not isinstance(params.kappa, jax.core.Tracer):
            kappa = np.asarray(params.kappa, np.float32)  # as training holds it: 1e39 is inf there
            if not (np.all(np.isfinite(kappa)) and np.all(kappa >= 0)):
                raise ValueError(f"{self.name}: EnvParams.kappa must be finite (in float32) and >= 0, got "
                                 f"{np.asarray(params.kappa).tolist()}")  # fmt: skip

    def validate_kernel(self, params: Any) -> None:
        """Raise ``ValueError`` if a concrete ``xi`` is not finite or lies outside the
        uncertainty box (training starts inside it; LTMA keeps it there)."""
        if any(isinstance(x, jax.core.Tracer) for x in (params.xi, params.xi_c, params.kappa)):
            return
        xi, xi_c, kappa = (np.asarray(x, np.float64) for x in (params.xi, params.xi_c, params.kappa))
        if not np.all(np.isfinite(xi)):
            raise ValueError(f"{self.name}: EnvParams.xi must be finite, got {xi.tolist()}")
        if np.any(np.abs(xi - xi_c) > box.reach(kappa)):
            raise ValueError(
                f"{self.name}: EnvParams.xi={xi.tolist()} is outside the uncertainty box "
                f"|xi - xi_c| <= kappa (xi_c={xi_c.tolist()}, kappa={kappa.tolist()})"
            )

    def kernel_ok(self, params: Any) -> jax.Array:
        """Traced: whether ``xi`` is finite and inside the box (``validate_kernel``'s rule)."""
        xi, xi_c, kappa = params.xi, params.xi_c, params.kappa
        finite = jnp.all(jnp.isfinite(xi)) & jnp.all(jnp.isfinite(kappa)) & jnp.all(kappa >= 0)
        return finite & jnp.all(jnp.abs(xi - xi_c) <= box.reach(kappa))

    # -------------------------------------------------------- test kernels
    @property
    def num_kernel_params(self) -> int:
        return int(np.prod(np.shape(self.default_params.xi_c)))

    def sign_directions(self) -> np.ndarray:
        """All ``2^n`` sign vectors in ``{-1, +1}^n``, shape ``(2^n, n)`` (``box.sign_directions``)."""
        return box.sign_directions(self.num_kernel_params)

    def test_kernels(self, levels, params: Any | None = None) -> Any:
        """Batched ``EnvParams`` over ``levels x directions`` (docs/method.md §1):
        ``xi = xi_c + level^2 * kappa * d``.  Every leaf gets leading axes
        ``(len(levels), 2^n)``, ready for a double ``jax.vmap``."""
        params = self.default_params if params is None else params
        self.validate_params(params)
        if not isinstance(levels, jax.core.Tracer):
            lv = np.asarray(levels, np.float64)
            if lv.ndim != 1 or not np.all(np.isfinite(lv)) or np.any(lv < 0) or np.any(lv > 1):
                raise ValueError(f"{self.name}: test kernel levels must be a 1-D array of numbers in [0, 1] (inside "
                                 f"the uncertainty box), got {lv.tolist()}")  # fmt: skip
        xi = box.distorted_kernels(params.xi_c, params.kappa, levels)
        n_l, n_d = xi.shape[:2]
        batched = jax.tree.map(lambda leaf: jnp.broadcast_to(jnp.asarray(leaf), (n_l, n_d) + jnp.shape(leaf)), params)
        return batched.replace(xi=xi)
