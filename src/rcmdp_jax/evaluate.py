"""Evaluation: the training curves' points (``curve_point``, the train step's phase 6) and
the robustness test (docs/method.md §4: ``make_eval``), every trained seed's deterministic
policy on every test kernel (levels x all 2^n sign directions), ``n_test`` episodes each,
as one vmapped, jit-compiled call."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rcmdp_jax import envs
from rcmdp_jax.config import Config
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import Policy, check_key, episode_values, run_episodes

DISTORTION_LEVELS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2))


def curve_point(key, it, env, actor, actor_params, env_params, cfg: Config, hp):
    """6. The training curve at iteration ``it``: the deterministic policy's mean return,
    constraint values and episode costs ``(V, C [m], EpCost [m])`` over ``cfg.eval_episodes``
    fresh episodes under the kernel ``env_params``, every ``cfg.eval_every`` iterations (NaN
    between)."""

    def evaluate(_):
        v, c, _, ep = run_episodes(key, env, env_params, actor, actor_params, cfg.eval_episodes, hp.gamma, True,
                                   ep_cost=True)  # fmt: skip
        return v.mean(), c.mean(0), ep.mean(0)

    def skip(_):
        nan = jnp.full((env.num_constraints,), jnp.nan, jnp.float32)
        return jnp.float32(jnp.nan), nan, nan

    return jax.lax.cond(it % cfg.eval_every == 0, evaluate, skip, None)


@dataclasses.dataclass(frozen=True, eq=False)
class Sweep:
    """The robustness test of one config: ``sweep(actor_params, rng) -> {"V": [S, L, D, E],
    "C": [S, L, D, E, m], "EpCost": [S, L, D, E, m], "bound": [S, L, D, E]}`` (``C`` each
    constraint discounted by its ``gamma_c``, ``EpCost`` the undiscounted episode cost,
    ``rollout.episode_cost``; ``bound``: 1 where the episode's kernel mean reached the
    environment's state bound, see ``envs.inventory``).

    ``actor_params`` carries a leading seed axis (as ``TrainResult.state.params["actor"]``
    of a vmapped run). Episode ``e`` of seed ``s`` uses the same random key on every
    kernel (common random numbers), so at level 0 all directions agree exactly. ``gamma``: the
    config's discount, which a call may give instead (an argument of the program: one
    compiled sweep serves configs that differ only in it)."""

    env: Any
    actor: Any
    kernels: Any  # env params with leading axes [L, D]
    levels: np.ndarray  # the distortion levels, float32
    n_test: int
    gamma: float

    def on(self, kernels) -> Sweep:
        """This sweep over ``kernels`` (the test kernels' parameters, leading axes ``[L, D]``: traced,
        an argument of the program, so one compiled sweep serves every limit, width and noise)."""
        return dataclasses.replace(self, kernels=kernels)

    def per_seed(self, actor_params, key, gamma=None):
        """One seed's sweep (unbatched): ``{"V": [L, D, E], "C", "EpCost": [L, D, E, m], "bound": [L, D, E]}``."""
        policy = Policy(self.actor, actor_params, deterministic=True)
        return policy_sweep(self.env, self.kernels, policy, self.n_test, self.gamma if gamma is None else gamma, key)

    def from_keys(self, actor_params, keys, gamma=None):
        """The sweep of every seed, with one evaluation key per seed given (and ``gamma``, one
        or one per seed, the sharded runner's way; None: the config's)."""
        gammas = jnp.broadcast_to(jnp.asarray(self.gamma if gamma is None else gamma, jnp.float32), keys.shape[:1])
        if jax.default_backend() == "cpu":
            # one seed at a time keeps the ~10^4-episode working set in cache, which
            # on a CPU is faster than vmapping the seeds too (docs/performance.md)
            return jax.lax.map(lambda a: self.per_seed(*a), (actor_params, keys, gammas))
        return jax.vmap(self.per_seed)(actor_params, keys, gammas)

    def __call__(self, actor_params, rng, gamma=None):
        check_key(rng)
        leaves = jax.tree.leaves(actor_params)
        if not leaves or not all(len(getattr(x, "shape", ())) >= 1 for x in leaves):
            raise TypeError("actor_params must be the actor's parameters with a leading seed axis (a vmapped "
                            f"run's TrainResult.state.params['actor']), got {type(actor_params).__name__} "
                            f"{actor_params!r:.60}")  # fmt: skip
        n_seeds = leaves[0].shape[0]
        return self.from_keys(actor_params, jax.random.split(rng, n_seeds), gamma)


def policy_sweep(env, kernels, policy, n_test: int, gamma, key) -> dict:
    """One policy (``policy(obs, key) -> action``: a ``rollout.Policy``, or a controller of
    one's own) on every kernel of ``kernels`` (leading axes ``[L, D]``), ``n_test`` episodes
    each with the same keys on every kernel: ``{"V": [L, D, E], "C", "EpCost": [L, D, E, m],
    "bound": [L, D, E]}``."""

    def one_episode(kernel, k):
        v, c, _, hit, ep = episode_values(k, env, kernel, policy, gamma, env.episode_length, ep_cost=True)
        return v, c, hit, ep

    over_eps = jax.vmap(one_episode, in_axes=(None, 0))
    over_levels = jax.vmap(jax.vmap(over_eps, in_axes=(0, None)), in_axes=(0, None))
    v, c, hit, ep = over_levels(kernels, jax.random.split(key, n_test))
    return {"V": v, "C": c, "EpCost": ep, "bound": hit}


def make_eval(config: Config, n_test: int | None = None, levels=DISTORTION_LEVELS, env_params=None) -> Sweep:
    """The ``Sweep`` of ``config``'s deterministic policies over every test kernel
    (``levels`` x all 2^n sign directions around ``env_params``, default nominal),
    ``n_test`` episodes each (default the environment's own: ``envs.spec(env).n_test``)."""
    if not isinstance(config, Config):
        raise TypeError(f"make_eval needs an rcmdp_jax.Config (e.g. preset('cartpole', 'PPO')), got "
                        f"{type(config).__name__}")  # fmt: skip
    cfg = config.validate()
    env, default_params = envs.make(cfg.env)
    if env_params is not None and not isinstance(env_params, type(default_params)):
        raise TypeError(f"env_params must be the environment's {type(default_params).__name__} (e.g. "
                        f"envs.make(name)[1]), got {type(env_params).__name__}")  # fmt: skip
    if n_test is None:
        n_test = envs.spec(cfg.env).n_test
    if isinstance(n_test, bool) or not isinstance(n_test, (int, np.integer)) or n_test < 1:
        raise ValueError(f"n_test must be a positive integer, got {n_test!r}")
    n_test = int(n_test)
    try:
        np.asarray(levels, np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"levels must be a 1-D array of distortion levels in [0, 1] (e.g. evaluate.DISTORTION_LEVELS), "
                        f"got {levels!r:.60}") from None  # fmt: skip
    actor, _ = build_networks(cfg, env)
    kernels = env.test_kernels(levels, default_params if env_params is None else env_params)
    n_kernels = int(np.prod(jax.tree.leaves(kernels)[0].shape[:2]))
    if n_kernels * n_test > 2**31 - 1:  # the episodes of one seed's sweep, counted in int32
        raise ValueError(f"n_test={n_test:,} gives {n_kernels * n_test:,} test episodes per seed ({n_kernels} kernels), "
                         f"beyond int32; at most {(2**31 - 1) // n_kernels:,}")  # fmt: skip
    return Sweep(env, actor, kernels, np.asarray(levels, dtype=np.float32), n_test, cfg.hparams.gamma)
