"""Sampling: the training rollout (auto-resetting parallel envs) and fresh
episodes from the start distribution (dual estimates, LTMA, evaluation)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct


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
    disc_costs: jax.Array  # (B, m) discounted constraint-costs
    discount: jax.Array  # gamma^t


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
    z = jnp.zeros((n_envs,), jnp.float32)
    return EpisodeAccumulator(z, z, jnp.zeros((n_envs, m), jnp.float32), jnp.ones_like(z))


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


def act(actor, actor_params, obs, key, deterministic: bool, dropout: bool = False):
    """Sample (or take the mode of) the policy at ``obs``; returns ``(action, log_prob)``.
    ``dropout``: act with the network in training mode (dropout drawn from ``key``),
    as MCPMD's reference does."""
    if dropout:
        k_drop, key = jax.random.split(key)
        dist = actor.apply(actor_params, obs, train=True, rngs={"dropout": k_drop})
    else:
        dist = actor.apply(actor_params, obs)
    action = dist.mode() if deterministic else dist.sample(seed=key)
    return action, dist.log_prob(action)


def make_policy(actor, actor_params, deterministic: bool = False, dropout: bool = False) -> Callable:
    """The policy as a function ``policy(obs, key) -> action``."""
    return lambda obs, key: act(actor, actor_params, obs, key, deterministic, dropout)[0]


def collect_episode(key, env, env_params, actor, actor_params, horizon: int, dropout: bool) -> Episode:
    """One whole episode from a fresh reset, at most ``horizon`` steps, with the stochastic
    policy (in training mode when ``dropout``). Steps after the episode ended are
    masked, so the buffer has a static shape under ``vmap``."""
    k_reset, k_run = jax.random.split(key)
    _, state = env.reset_env(k_reset, env_params)

    def body(carry, key):
        state, alive = carry
        k_act, k_drop, k_step = jax.random.split(key, 3)
        obs = env.get_obs(state)
        if dropout:
            dist = actor.apply(actor_params, obs, train=True, rngs={"dropout": k_drop})
        else:
            dist = actor.apply(actor_params, obs)
        action = dist.sample(seed=k_act)
        _, nstate, reward, term, info = env.step_env(k_step, state, action, env_params)
        out = Episode(obs, action, k_drop, dist.log_prob(action), reward, info["costs"], alive)
        return (nstate, alive * (1.0 - term.astype(jnp.float32))), out

    _, episode = jax.lax.scan(body, (state, jnp.float32(1.0)), jax.random.split(k_run, horizon))
    return episode


def collect_rollout(key, env, env_params, actor, actor_params, env_state, obs, acc, n_steps, gamma):
    """``n_steps`` steps of ``B`` auto-resetting envs with the stochastic policy.

    Returns ``(transitions [T, B], env_state, obs, acc, episode_stats)`` where
    ``episode_stats`` sums the returns/costs of the episodes completed here.
    """
    n_envs = obs.shape[0]
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def body(carry, key):
        env_state, obs, acc = carry
        k_act, k_step = jax.random.split(key)
        action, log_prob = act(actor, actor_params, obs, k_act, deterministic=False)
        next_obs, env_state, reward, term, trunc, info = step(
            jax.random.split(k_step, n_envs), env_state, action, env_params
        )
        done = jnp.logical_or(term, trunc)
        ret = acc.ret + reward
        disc_ret = acc.disc_ret + acc.discount * reward
        disc_costs = acc.disc_costs + acc.discount[:, None] * info["costs"]
        finished = done.astype(jnp.float32)
        stats = dict(
            episodes=finished,
            ret=finished * ret,
            disc_ret=finished * disc_ret,
            disc_costs=finished[:, None] * disc_costs,
        )
        keep = 1.0 - finished
        acc = EpisodeAccumulator(
            ret=keep * ret,
            disc_ret=keep * disc_ret,
            disc_costs=keep[:, None] * disc_costs,
            discount=jnp.where(done, 1.0, acc.discount * gamma),
        )
        tr = Transition(obs, action, log_prob, reward, info["costs"], term, done, info["final_observation"])
        return (env_state, next_obs, acc), (tr, stats)

    (env_state, obs, acc), (traj, stats) = jax.lax.scan(
        body, (env_state, obs, acc), jax.random.split(key, n_steps)
    )
    stats = jax.tree.map(lambda x: x.sum(axis=(0, 1)), stats)
    return traj, env_state, obs, acc, stats


def sample_episode(key, env, env_params, policy: Callable, horizon: int) -> Trajectory:
    """One fresh episode from the start distribution, at most ``horizon`` steps.

    ``policy(obs, key) -> action``. Steps after a true termination are masked
    (``alive = 0``) rather than cut, so the shape is static.
    """
    k_reset, k_run = jax.random.split(key)
    _, state = env.reset_env(k_reset, env_params)

    def body(carry, key):
        state, alive = carry
        k_act, k_step = jax.random.split(key)
        action = policy(env.get_obs(state), k_act)
        _, nstate, reward, term, info = env.step_env(k_step, state, action, env_params)
        out = Trajectory(state.s, action, nstate.s, reward, info["costs"], alive)
        return (nstate, alive * (1.0 - term.astype(jnp.float32))), out

    _, traj = jax.lax.scan(body, (state, jnp.float32(1.0)), jax.random.split(k_run, horizon))
    return traj


def episode_values(key, env, env_params, policy: Callable, gamma, horizon: int):
    """Discounted return ``V``, constraint values ``C`` (m,), length and whether the
    kernel's mean reached the environment's state bound at any step (Inventory), of
    one fresh episode, accumulated in the scan carry (nothing per step is stored, so
    very large vmapped batches of episodes fit in memory)."""
    k_reset, k_run = jax.random.split(key)
    _, state = env.reset_env(k_reset, env_params)
    m = env.num_constraints

    def body(carry, key):
        state, alive, disc, v, c, n, hit = carry
        k_act, k_step = jax.random.split(key)
        action = policy(env.get_obs(state), k_act)
        _, state, reward, term, info = env.step_env(k_step, state, action, env_params)
        v = v + alive * disc * reward
        c = c + alive * disc * info["costs"]
        n = n + alive
        hit = jnp.maximum(hit, alive * info["saturated"].astype(jnp.float32))
        alive = alive * (1.0 - term.astype(jnp.float32))
        return (state, alive, disc * gamma, v, c, n, hit), None

    zero = jnp.float32(0.0)
    init = (state, jnp.float32(1.0), jnp.float32(1.0), zero, jnp.zeros((m,)), zero, zero)
    (_, _, _, v, c, n, hit), _ = jax.lax.scan(body, init, jax.random.split(k_run, horizon))
    return v, c, n, hit


def run_episodes(key, env, env_params, actor, actor_params, n: int, gamma, deterministic: bool, dropout: bool = False):
    """``n`` full episodes in parallel: ``(V [n], C [n, m], total steps)``."""
    policy = make_policy(actor, actor_params, deterministic, dropout)

    one = lambda k: episode_values(k, env, env_params, policy, gamma, env.episode_length)  # noqa: E731
    v, c, steps, _ = jax.vmap(one)(jax.random.split(key, n))
    return v, c, steps.sum()
