"""Sampling: the training rollout (auto-resetting parallel envs) and fresh
episodes from the start distribution (dual estimates, LTMA, evaluation)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from rcmdp_jax.advantages import discounted_fold


@struct.dataclass
class Transition:
    """One step of the training rollout; leaves are ``[T, B, ...]`` after the scan."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    reward: jax.Array
    costs: jax.Array  # (m,)
    terminated: jax.Array  # true termination (cuts the value)
    done: jax.Array  # terminated or truncated (episode boundary)
    next_obs: jax.Array  # the true next observation, before any auto-reset


@struct.dataclass
class EpisodeAccumulator:
    """Running sums of the episodes in progress, one entry per parallel env."""

    ret: jax.Array  # undiscounted return
    disc_ret: jax.Array  # discounted return
    disc_costs: jax.Array  # (B, m) discounted constraint-costs (each by its gamma_c)
    discount: jax.Array  # gamma^t
    ep_costs: jax.Array  # (B, m) the episode cost EpCost so far (undiscounted, ``episode_cost``)
    steps: jax.Array  # t, the steps of the episode so far (the cost discounts' gamma_c^t)


@struct.dataclass
class Trajectory:
    """A batch of fresh episodes; leaves ``[E, H, ...]``; ``alive`` masks steps after termination."""

    s: jax.Array
    action: jax.Array
    s_next: jax.Array
    reward: jax.Array
    costs: jax.Array
    alive: jax.Array


def init_accumulator(n_envs: int, m: int) -> EpisodeAccumulator:
    z, zm = jnp.zeros((n_envs,), jnp.float32), jnp.zeros((n_envs, m), jnp.float32)
    return EpisodeAccumulator(z, z, zm, jnp.ones_like(z), zm, z)


def cost_discounts(env, gamma):
    """The constraints' discounts: ``gamma`` itself where ``env`` has no cost discount of its
    own (``env.cost_gammas`` None: the same program as ever), else ``[m]``, each constraint's
    ``gamma_c`` (NaN entries: ``gamma``). A ``gamma`` that is already a vector is returned."""
    own = getattr(env, "cost_gammas", None)
    if own is None or jnp.ndim(gamma) > 0:
        return gamma
    g = np.asarray(own, np.float32)
    return jnp.where(np.isnan(g), jnp.asarray(gamma, jnp.float32), g)


def value_discounts(env, gamma):
    """The discounts of ``[V, C_1..C_m]``: ``gamma`` where ``env`` has no cost discount of its
    own, else ``[1 + m]``, ``gamma`` then each constraint's ``cost_discounts``."""
    if getattr(env, "cost_gammas", None) is None or jnp.ndim(gamma) > 0:
        return gamma
    return jnp.concatenate([jnp.reshape(jnp.asarray(gamma, jnp.float32), (1,)), cost_discounts(env, gamma)])


def episode_cost(env, costs: jax.Array, params) -> jax.Array:
    """A step's share of the episode cost EpCost, ``[..., m]``: the per-step cost with the
    share an indicator subtracts added back (``B/H``: 1 per unsafe step; the step's parameters'
    ``cost_shares`` where they hold them, else ``env.cost_offsets``), else the cost itself; EpCost
    is its undiscounted sum over the episode."""
    offsets = getattr(env, "cost_offsets", None)
    if offsets is None:
        return costs
    shares = getattr(params, "cost_shares", None)
    return costs + (np.asarray(offsets, np.float32) if shares is None else shares)


@struct.dataclass
class Episode:
    """One whole episode of one environment in a fixed-length buffer (MCPMD's batch);
    leaves ``[T, ...]``; ``alive`` is 1 on the steps taken, 0 after the episode ended."""

    obs: jax.Array
    action: jax.Array
    dropout_key: jax.Array  # the dropout key each action was sampled with
    log_prob: jax.Array
    reward: jax.Array
    costs: jax.Array  # (m,)
    alive: jax.Array


@struct.dataclass
class EpisodeStep:
    """One step of a fresh episode, as ``scan_episode`` hands it to ``emit`` and ``fold``."""

    obs: jax.Array
    s: jax.Array  # the state vector before the step
    action: jax.Array
    s_next: jax.Array
    reward: jax.Array
    costs: jax.Array  # (m,)
    alive: jax.Array  # 1 until the episode has terminated
    saturated: jax.Array  # the kernel's mean reached the state bound (Inventory)
    log_prob: jax.Array
    dropout_key: jax.Array | None


@dataclasses.dataclass(frozen=True)
class Policy:
    """The actor as a function: the one place actions are drawn. ``policy(obs, key)``
    is the action; ``act`` also gives its log-probability. ``deterministic``: the
    distribution's mode; ``dropout``: the network in training mode (dropout on), as
    MCPMD's reference acts."""

    actor: Any
    params: Any
    deterministic: bool = False
    dropout: bool = False

    def act(self, obs, key, dropout_key=None):
        """``(action, log_prob)`` at ``obs``: sampled with ``key`` (or the mode), dropout
        drawn with ``dropout_key`` when the policy acts with dropout."""
        if self.dropout:
            dist = self.actor.apply(self.params, obs, train=True, rngs={"dropout": dropout_key})
        else:
            dist = self.actor.apply(self.params, obs)
        action = dist.mode() if self.deterministic else dist.sample(seed=key)
        return action, dist.log_prob(action)

    def __call__(self, obs, key):
        if self.dropout:
            dropout_key, key = jax.random.split(key)
            return self.act(obs, key, dropout_key)[0]
        return self.act(obs, key)[0]


def step_keys(key, dropout: bool, drop_at: int):
    """``(k_act, k_env, k_drop)`` of one step: ``key`` split in three when the policy acts
    with dropout (``k_drop`` at position ``drop_at`` of the split, each caller's own order,
    kept so that the numbers stay), else in two (``k_drop`` None)."""
    if not dropout:
        k_act, k_env = jax.random.split(key)
        return k_act, k_env, None
    keys = list(jax.random.split(key, 3))
    k_drop = keys.pop(drop_at)
    return keys[0], keys[1], k_drop


def scan_episode(key, env, env_params, policy: Callable, horizon: int, emit=None, fold=None, init=None,
                 replay_dropout: bool = False, truncate: int = 0):  # fmt: skip
    """One fresh episode from the start distribution, at most ``horizon`` steps, as one
    ``lax.scan``: the loop every episode of fresh starts runs (dual estimates, LTMA,
    evaluation, the robustness test, MCPMD's batch).

    ``policy(obs, key) -> action`` (any function, e.g. a ``Policy``). Steps after a true
    termination are masked (``alive = 0``) rather than cut, so the shape is static.
    Each step's ``EpisodeStep`` goes to ``emit(step) -> y`` (stacked ``[H, ...]``, nothing
    stored when ``emit`` is None) and ``fold(acc, step) -> acc`` from ``init`` (sums
    kept in the carry: very large vmapped batches of episodes fit in memory).
    ``replay_dropout`` (a dropout ``Policy``): each step draws its own dropout key and
    records it with the log-probability, so the learner can replay the perturbed policy.
    ``truncate = k > 0``: the state is a constant (``stop_gradient``) every ``k`` steps, so
    gradients through the sampled states span at most ``k`` transitions (pathwise
    gradients, ``rcmdp_jax.worst_case``); it changes no value. Returns ``(acc, ys)``.
    """
    k_reset, k_run = jax.random.split(key)
    _, state = env.reset_env(k_reset, env_params)

    def body(carry, xs):
        state, alive, acc = carry
        key, t = xs
        if truncate:
            cut = jax.tree.map(jax.lax.stop_gradient, state)
            state = jax.tree.map(lambda a, b: jnp.where(t % truncate == 0, a, b), cut, state)
        obs = env.get_obs(state)
        k_act, k_step, k_drop = step_keys(key, replay_dropout, drop_at=1)
        if replay_dropout:
            action, log_prob = policy.act(obs, k_act, k_drop)
        else:
            action, log_prob = policy(obs, k_act), jnp.float32(0.0)
        _, nstate, reward, term, info = env.step_env(k_step, state, action, env_params)
        step = EpisodeStep(
            obs, state.s, action, nstate.s, reward, info["costs"], alive, info["saturated"], log_prob, k_drop
        )
        acc = None if fold is None else fold(acc, step)
        y = None if emit is None else emit(step)
        return (nstate, alive * (1.0 - term.astype(jnp.float32)), acc), y

    xs = (jax.random.split(k_run, horizon), jnp.arange(horizon))
    (_, _, acc), ys = jax.lax.scan(body, (state, jnp.float32(1.0), init), xs)
    return acc, ys


def collect_episode(key, env, env_params, actor, actor_params, horizon: int, dropout: bool) -> Episode:
    """One whole episode from a fresh reset, at most ``horizon`` steps, with the stochastic
    policy (in training mode when ``dropout``): MCPMD's batch. Steps after the episode
    ended are masked, so the buffer has a static shape under ``vmap``."""
    policy = Policy(actor, actor_params, dropout=dropout)
    emit = lambda st: Episode(st.obs, st.action, st.dropout_key, st.log_prob, st.reward, st.costs, st.alive)
    return scan_episode(key, env, env_params, policy, horizon, emit=emit, replay_dropout=True)[1]


def per_env_params(env_params, env_xi: jax.Array):
    """``env_params`` with a leading env axis, env ``i`` on kernel ``env_xi[i]``."""
    n = env_xi.shape[0]
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + jnp.shape(x)), env_params).replace(xi=env_xi)


def collect_rollout(key, env, env_params, actor, actor_params, env_state, obs, acc, n_steps, gamma,
                    dropout: bool = False, env_xi=None, fresh_xi=None, deterministic: bool = False):  # fmt: skip
    """``n_steps`` steps of ``B`` auto-resetting envs with the stochastic policy (in
    training mode when ``dropout``).

    Returns ``(transitions [T, B], env_state, obs, acc, episode_stats)`` where
    ``episode_stats`` sums the returns/costs of the episodes completed here. Given
    ``env_xi`` (``[B, ...]``), env ``i`` runs kernel ``env_xi[i]``; given also
    ``fresh_xi`` (``[T, B, ...]``), an env whose episode ends at step ``t`` runs
    ``fresh_xi[t, i]`` from then on, and the final ``env_xi`` is returned as a sixth element.
    """
    n_envs = obs.shape[0]
    policy = Policy(actor, actor_params, deterministic, dropout=dropout)
    per_env = env_xi is not None
    step = jax.vmap(env.step, in_axes=(0, 0, 0, 0 if per_env else None))

    def body(carry, xs):
        env_state, obs, acc, xi = carry
        key, fresh = xs
        params = per_env_params(env_params, xi) if per_env else env_params
        k_act, k_step, k_drop = step_keys(key, dropout, drop_at=2)
        action, log_prob = policy.act(obs, k_act, k_drop)
        next_obs, env_state, reward, term, trunc, info = step(
            jax.random.split(k_step, n_envs), env_state, action, params
        )
        done = jnp.logical_or(term, trunc)
        if fresh is not None:
            xi = jnp.where(jnp.reshape(done, (-1,) + (1,) * (xi.ndim - 1)), fresh, xi)
        ret = acc.ret + reward
        disc_ret = discounted_fold((acc.discount, acc.disc_ret), reward, 1.0, gamma)[1]
        cost_discount = acc.discount[:, None]
        if (own := getattr(env, "cost_gammas", None)) is not None:  # gamma_c^t where a constraint has its own
            g = np.asarray(own, np.float32)
            cost_discount = jnp.where(np.isnan(g), cost_discount, np.nan_to_num(g) ** acc.steps[:, None])
        disc_costs = discounted_fold((cost_discount, acc.disc_costs), info["costs"], 1.0, 1.0)[1]
        ep_costs = acc.ep_costs + episode_cost(env, info["costs"], params)
        finished = done.astype(jnp.float32)
        stats = dict(
            episodes=finished,
            ret=finished * ret,
            disc_ret=finished * disc_ret,
            disc_costs=finished[:, None] * disc_costs,
            ep_costs=finished[:, None] * ep_costs,
        )
        keep = 1.0 - finished
        acc = EpisodeAccumulator(
            ret=keep * ret,
            disc_ret=keep * disc_ret,
            disc_costs=keep[:, None] * disc_costs,
            discount=jnp.where(done, 1.0, acc.discount * gamma),
            ep_costs=keep[:, None] * ep_costs,
            steps=keep * (acc.steps + 1.0),
        )
        tr = Transition(obs, action, log_prob, reward, info["costs"], term, done, info["final_observation"])
        return (env_state, next_obs, acc, xi), (tr, stats)

    init = (env_state, obs, acc, env_xi)
    (env_state, obs, acc, env_xi), (traj, stats) = jax.lax.scan(body, init, (jax.random.split(key, n_steps), fresh_xi))
    stats = jax.tree.map(lambda x: x.sum(axis=(0, 1)), stats)
    if fresh_xi is not None:
        return traj, env_state, obs, acc, stats, env_xi
    return traj, env_state, obs, acc, stats


def reward_and_costs(st: EpisodeStep | Trajectory) -> jax.Array:
    """The reward and constraint-costs of a step, ``[1 + m]``, or of every step of a batch, ``[..., 1 + m]``."""
    return jnp.concatenate([st.reward[..., None], st.costs], axis=-1)


def init_values(m: int, gamma=1.0) -> tuple[jax.Array, jax.Array]:
    """The start of ``fold_values``: ``(gamma^0, [V, C] = 0)``; ``gamma``: the discount it
    folds with (a vector of ``value_discounts``: one ``gamma^0`` per quantity)."""
    return jnp.ones(jnp.shape(gamma), jnp.float32), jnp.zeros((1 + m,))


def fold_values(sums: tuple[jax.Array, jax.Array], st: EpisodeStep, gamma) -> tuple[jax.Array, jax.Array]:
    """One step of an episode's discounted ``[V, C_1..C_m]`` (``advantages.discounted_fold``
    of ``reward_and_costs``, masked after termination): the fold every episode of fresh
    starts sums its values with (``episode_values``, ``kernel_gradients.episode_quantities``,
    MCPMD's stored episode: ``stored_values``)."""
    return discounted_fold(sums, reward_and_costs(st), st.alive, gamma)


def stored_values(episode: Episode, gamma) -> tuple[jax.Array, jax.Array]:
    """The discounted return ``V`` and constraint values ``C`` (m,) of a stored episode
    (``collect_episode``'s, leaves ``[T, ...]``), by the same fold as ``episode_values``."""
    step = lambda sums, st: (fold_values(sums, st, gamma), None)
    (_, total), _ = jax.lax.scan(step, init_values(episode.costs.shape[-1], gamma), episode)
    return total[0], total[1:]


def sample_episode(key, env, env_params, policy: Callable, horizon: int) -> Trajectory:
    """One fresh episode (``scan_episode``) stored step by step; leaves ``[H, ...]``."""
    emit = lambda st: Trajectory(st.s, st.action, st.s_next, st.reward, st.costs, st.alive)
    return scan_episode(key, env, env_params, policy, horizon, emit=emit)[1]


def episode_values(key, env, env_params, policy: Callable, gamma, horizon: int, ep_cost: bool = False):
    """Discounted return ``V``, constraint values ``C`` (m,; each by its ``cost_discounts``),
    length and whether the kernel's mean reached the environment's state bound at any step
    (Inventory), of one fresh episode (``scan_episode``), summed in the carry; with
    ``ep_cost``, also its episode cost EpCost (m,; ``episode_cost``) last."""
    gamma = value_discounts(env, gamma)

    def fold(acc, st):
        sums, n, hit, epc = acc
        sums = fold_values(sums, st, gamma)
        hit = jnp.maximum(hit, st.alive * st.saturated.astype(jnp.float32))
        return sums, n + st.alive, hit, epc + st.alive * episode_cost(env, st.costs, env_params)

    zero = jnp.float32(0.0)
    init = (init_values(env.num_constraints, gamma), zero, zero, jnp.zeros((env.num_constraints,), jnp.float32))
    ((_, total), n, hit, epc), _ = scan_episode(key, env, env_params, policy, horizon, fold=fold, init=init)
    return (total[0], total[1:], n, hit) + ((epc,) if ep_cost else ())


def run_episodes(key, env, env_params, actor, actor_params, n: int, gamma, deterministic: bool, dropout: bool = False,
                 ep_cost: bool = False):  # fmt: skip
    """``n`` full episodes in parallel: ``(V [n], C [n, m], total steps)``, and with
    ``ep_cost`` their episode costs ``[n, m]`` last."""
    policy = Policy(actor, actor_params, deterministic, dropout)

    one = lambda k: episode_values(k, env, env_params, policy, gamma, env.episode_length, ep_cost)
    out = jax.vmap(one)(jax.random.split(key, n))
    return (out[0], out[1], out[2].sum()) + tuple(out[4:])


def check_key(key, what: str = "rng") -> None:
    """Refuse what is not a JAX random key (``jax.random.PRNGKey(seed)``, ``jax.random.key(seed)``
    or a batch of them under ``vmap``), traced or not, with a ``TypeError`` naming it."""
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return
    if dtype != jnp.uint32 or shape is None or tuple(shape) != jax.eval_shape(jax.random.PRNGKey, 0).shape:
        got = f"an array of {dtype} {tuple(shape)}" if dtype is not None and shape is not None else type(key).__name__
        raise TypeError(f"{what} must be a JAX random key (jax.random.PRNGKey(seed) or jax.random.key(seed)), "
                        f"got {got}")  # fmt: skip


def check_observation(obs, obs_dim: int, env_name: str) -> jax.Array:
    """``obs`` as one observation ``(obs_dim,)`` of ``env_name``: ``TypeError`` (not numbers),
    ``ValueError`` (another shape; a concrete one with NaN or inf, naming its entries)."""
    try:  # a tracer is a jax.Array: checked by its dtype and shape; None, text: of no number's dtype
        dtype = obs.dtype if isinstance(obs, jax.Array) else np.asarray(obs).dtype
    except (TypeError, ValueError):  # a ragged list
        dtype = np.dtype(object)
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        got = f"{type(obs).__name__} {getattr(obs, 'dtype', '')}".rstrip()
        raise TypeError(f"obs must be one observation, an array of {obs_dim} numbers, got {got}")
    obs = obs if isinstance(obs, jax.Array) else jnp.asarray(obs, jnp.float32)
    if tuple(obs.shape) != (obs_dim,):
        raise ValueError(f"obs must have shape {(obs_dim,)} (one observation of {env_name}; jax.vmap(policy.act) "
                         f"for a batch), got {tuple(obs.shape)}")  # fmt: skip
    if not isinstance(obs, jax.core.Tracer) and not np.all(finite := np.isfinite(np.asarray(obs))):
        bad = ", ".join(f"obs[{i}] = {float(obs[i])}" for i in np.flatnonzero(~finite))
        raise ValueError(f"obs must be finite numbers, got {bad} (an observation of {env_name})")
    return obs
