"""Any gymnax environment made robust and constrained: ``robustify`` returns a
``RobustEnvironment`` with the study domains' contract (learners, LTMA, the robustness
test, the worst-case search, checkpoints and the runner work on it unchanged).

* ``xi``: the ``uncertain`` float fields of the env's ``EnvParams`` (nominal: the env's default;
  box half-width absolute or relative); a ``derive`` hook recomputes fields gymnax stores
  rather than computes (CartPole-v1's ``total_mass``, ``polemass_length``).
* Kernel ``s' ~ Normal(f_xi(s, a), diag(noise^2))`` around gymnax's own ``step_env``, on the
  float fields of ``EnvState`` as one vector (``time`` apart); an entry built with zero noise
  is deterministic (no draw, no density). gymnax cuts gradients at the end of its classic
  steps; the wrapper evaluates the step's jaxpr without those ``stop_gradient`` equations, so
  ``grad_xi log p`` and pathwise gradients reach the physics. An inner env's own randomness
  (Acrobot's torque noise) gets a fixed key: the Normal is the whole density.
* Rewards, observations, termination and truncation are gymnax's (the noiseless step's reward;
  ``get_obs``, ``is_terminated`` on the sampled state); under ``jit`` an action outside the
  action space (or a non-finite step) gives NaN and ends the episode.
* Costs ``c(state, action, next_state, params) -> (k,)`` on gymnax ``EnvState``s and the perturbed
  ``EnvParams``, the ``m`` constraint-costs (a constraint holds when its discounted sum is <= 0).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

import distrax
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces
from jax.extend import core as jcore
from rcmdp_jax.envs.base import RobustEnvironment, RobustState
from rcmdp_jax.envs.gymnax_any import FieldLimit, allowed_fields, float_fields
from rcmdp_jax.envs.gymnax_inputs import check_cost_fns, check_cost_shapes, cost_functions, half_width, noise_vector
from rcmdp_jax.envs.unsafe_steps import cost_terms, finalise

from rcmdp_jax.plugin import closest

CostFn = Callable[[Any, jax.Array, Any, Any], jax.Array]


@struct.dataclass
class WrappedParams(environment.EnvParams):
    """``xi`` (uncertain fields), nominal ``xi_c``, half-widths ``kappa``, noise, gymnax ``EnvParams``."""

    xi: jax.Array = None
    xi_c: jax.Array = None
    kappa: jax.Array = None
    noise: jax.Array = None
    # per constraint entry, the numbers of its cost that the step reads here, so that a program takes
    # them as arguments: a FIELD:LIMIT cost's limit (``gymnax_any.FieldLimit``) and an indicator's
    # budget share B/H (``envs.indicator``); None where no cost has either
    cost_limits: jax.Array = None
    cost_shares: jax.Array = None
    inner: Any = None
    max_steps_in_episode: int = 1


def eval_without_stop_gradient(fn: Callable, *args):
    """``fn(*args)`` with the ``stop_gradient`` equations of its jaxpr's top level dropped,
    so gradients flow through an environment step that cuts them (gymnax's classic
    control). Values are unchanged; only the derivative differs."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    jaxpr, env = closed.jaxpr, {}
    read = lambda v: v.val if isinstance(v, jcore.Literal) else env[v]
    for var, val in zip(jaxpr.constvars, closed.consts):
        env[var] = val
    for var, val in zip(jaxpr.invars, jax.tree.leaves(args)):
        env[var] = val
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name == "stop_gradient":
            outs = invals
        else:
            bind = eqn.primitive.get_bind_params(eqn.params)
            subfuns, bind = bind if isinstance(bind, tuple) else ((), bind)  # older JAX: (subfuns, params)
            outs = eqn.primitive.bind(*subfuns, *invals, **bind)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for var, val in zip(eqn.outvars, outs):
            if not isinstance(var, jcore.DropVar):
                env[var] = val
    return jax.tree.unflatten(jax.tree.structure(out_shape), [read(v) for v in jaxpr.outvars])


class RobustGymnax(RobustEnvironment):
    """A gymnax environment with a Gaussian kernel around its step and an uncertainty box
    over named ``EnvParams`` fields (see the module docstring). Build it with ``robustify``."""

    def __init__(self, env: environment.Environment, params, uncertain: Mapping[str, Any],
                 costs: Mapping[str, CostFn], noise, derive: Callable | None = None, gamma: float = 0.99,
                 lambda_max: float = 50.0, min_episode_length: int | None = None, name: str | None = None):  # fmt: skip
        super().__init__()
        self.inner, self.inner_params, self.derive = env, params, derive
        if not uncertain:
            raise ValueError("uncertain: name at least one EnvParams field")
        if not costs:
            raise ValueError("costs: give at least one cost function c(state, action, next_state, params)")
        allowed = float_fields(params)
        for field in uncertain:
            if not isinstance(field, str) or not hasattr(params, field):
                raise ValueError(f"uncertain: {type(env).__name__}'s EnvParams has no field {field!r}"
                                 f"{closest(str(field), allowed)}; "
                                 f"{allowed_fields(allowed)}")  # fmt: skip
            if field not in allowed:
                raise ValueError(f"uncertain: EnvParams.{field} = {getattr(params, field)!r} is not a float "
                                 f"scalar; {allowed_fields(allowed)}")  # fmt: skip
        self.fields = tuple(uncertain)
        nominal = np.array([float(getattr(params, f)) for f in self.fields], np.float32)
        kappa = np.array([half_width(f, uncertain[f], float(n)) for f, n in zip(self.fields, nominal)], np.float32)
        costs = finalise(dict(costs), int(params.max_steps_in_episode))  # envs.indicator: per step
        self.cost_names = tuple(costs)
        self.cost_fns = tuple(costs[c] for c in self.cost_names)
        # the flat state: EnvState's fields but time, from one reset's shapes
        _, shape = jax.eval_shape(env.reset_env, jax.random.key(0), params)
        self.state_cls = type(shape)
        self.state_fields = tuple(f.name for f in dataclasses.fields(shape) if f.name != "time")
        for f in self.state_fields:
            if not jnp.issubdtype(getattr(shape, f).dtype, jnp.floating):
                raise ValueError(f"{env.name}: EnvState.{f} is {getattr(shape, f).dtype}; the wrapper's kernel "
                                 "needs float state fields (time apart)")  # fmt: skip
        self.field_shapes = tuple(getattr(shape, f).shape for f in self.state_fields)
        self.state_dim = int(sum(math.prod(s) for s in self.field_shapes))
        obs = jax.eval_shape(lambda s: env.get_obs(s, params), shape)
        self._obs_dim = int(math.prod(obs.shape))
        space = env.action_space(params)
        self.discrete = isinstance(space, spaces.Discrete)
        self.action_dim = int(space.n) if self.discrete else int(math.prod(space.shape))
        self._action_space = space
        noise = noise_vector(noise, self.state_dim, self.state_fields)
        # the entries with noise > 0 here, fixed for this env (static): only they are drawn and
        # have a density; the others are deterministic functions of (s, a)
        self.noisy = tuple(int(i) for i in np.flatnonzero(noise > 0))
        self.episode_length = int(params.max_steps_in_episode)
        self.min_episode_length = self.episode_length if min_episode_length is None else int(min_episode_length)
        self.gamma, self.lambda_max = float(gamma), float(lambda_max)
        check_cost_shapes(costs, shape, self._sample_action(), params, self._cost_args)
        m = jax.eval_shape(lambda s, p: self._costs(s, self._sample_action(), s, p), shape, params)
        self.num_constraints = int(m.shape[0])
        self.cost_gammas, self.cost_offsets = self._cost_terms(shape, params)
        limits, shares = self._cost_numbers()
        self._name = name or f"Robust{env.name}"
        self._default = WrappedParams(
            xi=jnp.asarray(nominal), xi_c=jnp.asarray(nominal), kappa=jnp.asarray(kappa), noise=jnp.asarray(noise),
            cost_limits=limits, cost_shares=shares, inner=params, max_steps_in_episode=self.episode_length,
        )  # fmt: skip

    # ------------------------------------------------------------ plumbing
    @property
    def default_params(self) -> WrappedParams:
        return self._default

    @property
    def name(self) -> str:
        return self._name

    @property
    def obs_dim(self) -> int:
        return self._obs_dim

    def _sample_action(self):
        return jnp.zeros((), jnp.int32) if self.discrete else jnp.zeros((self.action_dim,), jnp.float32)

    def apply_xi(self, params: WrappedParams):
        """The gymnax ``EnvParams`` under kernel ``params.xi`` (derived fields recomputed)."""
        inner = params.inner.replace(**{f: params.xi[i] for i, f in enumerate(self.fields)})
        return inner if self.derive is None else self.derive(inner)

    def flatten(self, state) -> jax.Array:
        return jnp.concatenate([jnp.ravel(getattr(state, f)).astype(jnp.float32) for f in self.state_fields])

    def unflatten(self, s: jax.Array, time) -> Any:
        parts, i = {}, 0
        for f, shape in zip(self.state_fields, self.field_shapes):
            n = math.prod(shape)
            parts[f] = s[i : i + n].reshape(shape)
            i += n
        return self.state_cls(**parts, time=time)

    def _cost_args(self, state, action, next_state, inner):
        """What a cost function is called with (a subclass may show it the step otherwise)."""
        return state, action, next_state, inner

    def _cost_terms(self, shape, params):
        """Per constraint, each cost function's ``(gamma_c, b)`` (``unsafe_steps.cost_terms``)
        repeated over its entries: ``(cost_gammas, cost_offsets)``, or ``(None, None)`` where
        every cost is discounted by gamma and shifts nothing (the presets' own costs)."""
        gammas, offsets, self.cost_sizes = [], [], []
        for fn in self.cost_fns:
            gamma_c, b = cost_terms(fn)
            k = jax.eval_shape(lambda s, p, fn=fn: fn(*self._cost_args(s, self._sample_action(), s, p)), shape, params)
            gammas += [np.nan if gamma_c is None else gamma_c] * int(k.shape[0])
            offsets += [b] * int(k.shape[0])
            self.cost_sizes.append(int(k.shape[0]))
        if all(np.isnan(gammas)) and not any(offsets):
            return None, None
        return tuple(float(g) for g in gammas), tuple(float(b) for b in offsets)

    def _cost_numbers(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(cost_limits, cost_shares)`` of the default parameters, per constraint entry (float32):
        each FIELD:LIMIT cost's limit and each indicator's B/H (0 where a cost has none), or
        ``(None, None)`` where no cost has either (costs of one's own: their numbers are theirs)."""
        limits, shares, numbered = [], [], False
        for fn, k in zip(self.cost_fns, self.cost_sizes):
            limit, indicator = field_limit(fn), hasattr(fn, "unsafe")
            limits += [0.0 if limit is None else limit.limit] * k
            shares += [float(fn.offset) if indicator else 0.0] * k
            numbered |= indicator or limit is not None
        return (np.asarray(limits, np.float32), np.asarray(shares, np.float32)) if numbered else (None, None)

    def _costs(self, state, action, next_state, inner, params=None):
        """The ``m`` constraint-costs; a FIELD:LIMIT cost's limit and an indicator's B/H read from
        ``params`` (``WrappedParams``) where given, else each function's own."""
        args = self._cost_args(state, action, next_state, inner)
        if params is None or params.cost_limits is None:
            return jnp.concatenate([jnp.reshape(c(*args), (-1,)) for c in self.cost_fns])
        out, i = [], 0
        for fn, k in zip(self.cost_fns, self.cost_sizes):
            limit = field_limit(fn)
            if hasattr(fn, "unsafe"):  # an indicator: 1 per unsafe step less B/H
                flag = fn.unsafe(*args) if limit is None else limit.at(next_state, params.cost_limits[i])
                out.append(jnp.atleast_1d(jnp.asarray(flag).astype(jnp.float32)) - params.cost_shares[i : i + k])
            elif limit is not None:
                out.append(limit.at(next_state, params.cost_limits[i]))
            else:
                out.append(jnp.reshape(fn(*args), (-1,)))
            i += k
        return jnp.concatenate(out)

    # ------------------------------------------------------------ the model
    def gymnax_step(self, state, action, inner):
        """gymnax's own ``step_env`` from ``state`` (a gymnax ``EnvState``), gradients kept:
        ``(next EnvState, reward)``. The inner env's randomness gets a fixed key."""
        fn = lambda st, a, p: self.inner.step_env(jax.random.key(0), st, a, p)[1:3]
        return eval_without_stop_gradient(fn, state, action, inner)

    def transition(self, params: WrappedParams, s, time, action, inner=None):
        """``(f_xi(s, a), reward)``: the noiseless next state vector and gymnax's reward
        (``inner``: ``apply_xi(params)`` when the caller has it)."""
        inner = self.apply_xi(params) if inner is None else inner
        nxt, reward = self.gymnax_step(self.unflatten(s, time), action, inner)
        return self.flatten(nxt), jnp.asarray(reward, jnp.float32).reshape(())

    def next_state_distribution(self, params, s, action, time=0):
        """The Normal of the noisy entries of ``s'`` (all of them unless the env was built
        with zero noise on some); event shape ``(len(noisy),)``."""
        mean, _ = self.transition(params, s, time, action)
        idx = jnp.asarray(self.noisy, jnp.int32)
        return distrax.MultivariateNormalDiag(mean[idx], params.noise[idx])

    def transition_log_prob(self, xi, params, s, action, s_next):
        """``log p_xi(s'_noisy | s, a)``: the density of the noisy entries (a zero-noise entry
        is a deterministic function of ``(s, a)``; for an unbiased score it must not depend
        on ``xi``, as Pendulum's ``last_u``, the applied torque, does not)."""
        dist = self.next_state_distribution(params.replace(xi=xi), s, action)
        return dist.log_prob(s_next[jnp.asarray(self.noisy, jnp.int32)])

    def initial_state(self, key, params):
        return self.flatten(self.inner.reset_env(key, self.apply_xi(params))[1])

    def step_env(self, key, state: RobustState, action, params):
        inner = self.apply_xi(params)
        mean, reward = self.transition(params, state.s, state.time, action, inner)
        if self.noisy:  # the Normal's reparameterised sample on the noisy entries; one draw of their size
            idx = jnp.asarray(self.noisy, jnp.int32)
            s_next = mean.at[idx].add(params.noise[idx] * jax.random.normal(key, (len(self.noisy),)))
        else:  # a deterministic kernel draws nothing
            s_next = mean
        bad = jnp.logical_not(self.action_valid(action) & jnp.all(jnp.isfinite(s_next)))
        s_next, reward = jnp.where(bad, jnp.nan, s_next), jnp.where(bad, jnp.nan, reward)
        new_state = RobustState(s=s_next, time=state.time + 1)
        before, after = self.unflatten(state.s, state.time), self.unflatten(s_next, new_state.time)
        costs = jnp.where(bad, jnp.nan, self._costs(before, action, after, inner, params))
        terminated = jnp.asarray(self.inner.is_terminated(after, inner)).reshape(()) | bad
        info = {"costs": costs, "saturated": jnp.zeros((), bool)}
        return self._obs(after, inner), new_state, reward, terminated, info

    def is_terminated_vec(self, params, s_next):
        return jnp.asarray(self.inner.is_terminated(self.unflatten(s_next, 0), self.apply_xi(params))).reshape(())

    def _obs(self, inner_state, inner) -> jax.Array:
        return jnp.ravel(self.inner.get_obs(inner_state, inner)).astype(jnp.float32)

    def get_obs(self, state: RobustState, params=None, key=None) -> jax.Array:
        inner = self.inner_params if params is None else self.apply_xi(params)
        return self._obs(self.unflatten(state.s, state.time), inner)

    def check_estimator(self, params, estimator: str) -> None:
        """The score function needs a density: refuse it on a noiseless kernel."""
        if estimator == "score" and not self.noisy:
            noise = np.asarray(self._default.noise).tolist()
            raise ValueError(f"{self.name}: the score-function estimator needs noise > 0 on some state entry "
                             f"(noise={noise}); use ltma_estimator='pathwise' or robustify with noise > 0")  # fmt: skip

    def action_space(self, params=None):
        return self._action_space

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (self.obs_dim,), jnp.float32)


def field_limit(fn) -> FieldLimit | None:
    """The ``FieldLimit`` of a cost function (FIELD:LIMIT, or an indicator of 'FIELD>LIMIT'), or None."""
    for part in (fn, getattr(fn, "unsafe", None)):
        if isinstance(part, FieldLimit):
            return part
    return None


def robustify(env: environment.Environment, uncertain: Mapping[str, Any], costs: Mapping[str, CostFn] | Sequence,
              noise=None, params=None, derive: Callable | None = None, **options) -> RobustGymnax:  # fmt: skip
    """``env`` (any gymnax ``Environment``, or a brax env: ``envs.brax_wrapper``) as a ``RobustEnvironment``.

    ``uncertain``: ``{field: half_width}`` over float fields of ``env``'s ``EnvParams``
    (a number or ``relative(f)``: ``f`` x the nominal value; ``absolute(h)``).
    ``costs``: ``{name: c(state, action, next_state, params) -> (k,)}`` (or a list of
    functions; ``envs.indicator(unsafe, budget)``: 1 per unsafe step, a budget per episode). ``noise``: the kernel's std (default 1e-3), a number or one per state entry (0 keeps the
    kernel deterministic: pathwise LTMA only). ``params``: the nominal ``EnvParams``
    (default ``env.default_params``; its ``max_steps_in_episode`` is the episode length).
    ``derive(params) -> params`` recomputes stored derived fields after ``xi`` is applied
    (gymnax's own envs get theirs by default: ``gymnax_any.KNOWN_DERIVE``). ``options``: ``gamma``, ``lambda_max``, ``min_episode_length``, ``name``."""
    if type(env).__module__.startswith("brax."):  # a brax env: the physical system's fields (envs.brax_wrapper)
        return import_module("rcmdp_jax.envs.brax_wrapper").robustify_brax(env, uncertain, costs, noise=noise, params=params,
                                                                           derive=derive, **options)  # fmt: skip
    if not isinstance(env, environment.Environment):
        raise TypeError(f"robustify needs a gymnax Environment or a brax env, got {type(env).__name__}")
    if not isinstance(uncertain, Mapping):
        raise TypeError(f"uncertain must be a dict {{field: half_width}}, got {type(uncertain).__name__}")
    costs = cost_functions(costs)
    params = env.default_params if params is None else params
    check_cost_fns(costs)
    noise = 1e-3 if noise is None else noise
    derive = derive if derive is not None else import_module("rcmdp_jax.envs.gymnax_any").known_derive(env, uncertain)
    return RobustGymnax(env, params, uncertain, costs, noise, derive, **options)
