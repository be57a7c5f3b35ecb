"""The dual phase (docs/method.md §2a.4): ``dual_phase``, ``K`` ascent steps of the lane's
constraint rule (``rcmdp_jax.constraints``) on the multipliers, and what they read, the
estimates of the constraint values ``C^`` (docs/method.md §2a.4 leaves the reading open;
``docs/sensitivity.md`` compares the readings), sampled here.

"start_value": the start state's discounted cost value ``V_c(rho)`` from fresh episodes,
the same for every step. The others read the multiplier batch (``n_dual_episodes``
auto-resetting envs x ``dual_batch / n_dual_episodes`` steps from fresh starts), one value
per time step, and each ascent step uses one shuffled minibatch's mean of them:
"step_cost" the per-step costs, "cost_to_go" the discounted cost-to-go ``G_t`` inside the
batch (cut at its end), "gae" the critic's GAE cost returns (bootstrapped at the cut).
Each constraint's values are discounted by its own ``gamma_c`` where the environment gives
one (``rollout.cost_discounts``; 1: the episode cost less the budget), read once for every
estimator (``dual_estimates``).

Every rule reads one reading (``reading``): ``C^`` and the per-step estimates with the margin
added once, ``cost_margin`` (fixed, in units of C) plus the data margin ``margin_z sigma_j /
sqrt(margin_n)``, ``sigma_j`` the per-episode spread of constraint ``j`` that the dual's own
episodes show (``track_spread``: an exponential average over iterations of their moments;
docs/method.md §2a.4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax import constraints
from rcmdp_jax.advantages import discounted_returns, gae
from rcmdp_jax.rollout import collect_rollout, init_accumulator, per_env_params, run_episodes, value_discounts

DUAL_ESTIMATORS = ("start_value", "step_cost", "cost_to_go", "gae")
# the weight of the past in the spread's running moments (``track_spread``): about the last ten
# iterations' episodes, so that it follows the policy as it learns
SPREAD_DECAY = 0.9


def batch_readings(estimator: str, costs, terminated, done, values=None, next_values=None, gamma=0.99,
                   gae_lambda=0.95) -> jax.Array:  # fmt: skip
    """The multiplier batch's per-time-step readings of C, ``[T, B, m]`` from the costs
    ``[T, B, m]`` of ``B`` auto-resetting envs: "step_cost" the costs; "cost_to_go"
    ``G_t = c_t + gamma (1 - done_t) G_{t+1}`` (no bootstrap at the end); "gae" the GAE
    returns of the critic's cost heads ``values``/``next_values`` (``[T, B, m]``)."""
    if estimator == "step_cost":
        return costs
    if estimator == "cost_to_go":
        return discounted_returns(costs, done, gamma)
    if estimator == "gae":
        return gae(costs, values, next_values, terminated, done, gamma, gae_lambda)[1]
    raise ValueError(
        f"dual_estimator={estimator!r} has no batch readings; choose one of: {', '.join(DUAL_ESTIMATORS[1:])}"
    )


def minibatch_means(key: jax.Array, values: jax.Array, n_epochs: int, minibatch: int) -> jax.Array:
    """``values [N, m]`` -> ``[n_epochs * ceil(N / minibatch), m]``: each epoch a fresh
    shuffle of the ``N`` time steps, cut in minibatches of ``minibatch`` (the last one
    shorter when ``minibatch`` does not divide ``N``); the mean of each, in order."""
    n = values.shape[0]
    per_epoch = -(-n // minibatch)
    pad = per_epoch * minibatch - n

    def epoch(k):
        order = jax.random.permutation(k, n)
        idx = jnp.concatenate([order, jnp.zeros((pad,), order.dtype)]).reshape(per_epoch, minibatch)
        w = jnp.concatenate([jnp.ones((n,)), jnp.zeros((pad,))]).reshape(per_epoch, minibatch)
        return jnp.einsum("kb,kbm->km", w, values[idx]) / w.sum(1, keepdims=True)

    return jax.vmap(epoch)(jax.random.split(key, n_epochs)).reshape(n_epochs * per_epoch, values.shape[1])


def multiplier_batch(key, env, env_params, actor, critic, params, cfg, hp, dropout: bool, gamma_c, env_xi=None):
    """The multiplier batch's per-time-step readings of the constraint values (``cfg.
    dual_estimator``), ``[dual_batch, m]``, and its whole episodes' values (``batch_episodes``),
    each constraint's discounted by its ``gamma_c`` (scalar or ``(m,)``):
    ``n_dual_episodes`` auto-resetting envs from fresh starts, ``dual_batch / n_dual_episodes``
    steps each (docs/method.md §2a.4: 4 x 100); given ``env_xi`` (``[B, ...]``), env ``i`` runs
    kernel ``env_xi[i mod B]``."""
    n = cfg.n_dual_episodes
    k_reset, k_run = jax.random.split(key)
    if env_xi is None:
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, n), env_params)
    else:
        env_xi = env_xi[jnp.arange(n) % env_xi.shape[0]]
        per_env = per_env_params(env_params, env_xi)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k_reset, n), per_env)
    traj = collect_rollout(k_run, env, env_params, actor, params["actor"], env_state, obs,
                           init_accumulator(n, env.num_constraints), cfg.dual_batch // n, hp.gamma, dropout,
                           env_xi=env_xi, deterministic=cfg.dual_deterministic)[0]  # fmt: skip
    v = v_next = None
    if cfg.dual_estimator == "gae":  # the critic's cost heads
        v = critic.apply(params["critic"], traj.obs)[..., 1:]
        v_next = critic.apply(params["critic"], traj.next_obs)[..., 1:]
    values = batch_readings(cfg.dual_estimator, traj.costs, traj.terminated, traj.done, v, v_next, gamma_c,
                            hp.gae_lambda)  # fmt: skip
    to_go = values if cfg.dual_estimator == "cost_to_go" else None  # the same cost-to-go: computed once
    return values.reshape(-1, env.num_constraints), batch_episodes(traj.costs, traj.done, gamma_c, to_go)


def batch_episodes(costs, done, gamma_c, to_go=None) -> tuple[jax.Array, jax.Array]:
    """The values ``C`` of the whole episodes inside a batch of ``B`` envs that start fresh at its
    first step (``costs [T, B, m]``, ``done [T, B]``): ``(values [T * B, m], weights [T * B])``,
    the discounted cost-to-go at each episode's first step, weight 1 where that episode also
    ends inside the batch, else 0 (an episode cut by the batch's end is not a whole one); ``to_go``:
    the batch's discounted cost-to-go where the caller has it."""
    ends = done.astype(jnp.float32)
    starts = jnp.concatenate([jnp.ones_like(ends[:1]), ends[:-1]])
    ends_later = jnp.flip(jnp.cumsum(jnp.flip(ends, 0), 0), 0) > 0  # an end at this step or after
    values = discounted_returns(costs, done, gamma_c) if to_go is None else to_go
    return values.reshape(-1, costs.shape[-1]), (starts * ends_later).reshape(-1)


def track_spread(spread: jax.Array, values: jax.Array, weights: jax.Array, decay=SPREAD_DECAY) -> jax.Array:
    """The running moments ``[3, m]`` (episodes, sum of ``C``, sum of ``C^2``; each an exponential
    average over iterations, weight ``decay`` on the past) after this iteration's episodes ``values
    [N, m]`` with ``weights [N]`` (1 a whole episode, 0 none)."""
    w = weights[:, None]
    now = jnp.stack([jnp.broadcast_to(weights.sum(), values.shape[1:]), (w * values).sum(0), (w * values**2).sum(0)])
    return decay * spread + (1.0 - decay) * now


def spread_sigma(spread: jax.Array) -> jax.Array:
    """The per-episode standard deviation ``sigma_j`` (m,) of the running moments
    (``track_spread``); 0 before any whole episode was seen."""
    n, s1, s2 = spread
    seen = n > 0
    mean = s1 / jnp.where(seen, n, 1.0)
    return jnp.where(seen, jnp.sqrt(jnp.maximum(s2 / jnp.where(seen, n, 1.0) - mean**2, 0.0)), 0.0)


def margin_of(spread: jax.Array, hp) -> jax.Array:
    """The margin (m,) the rule reads ``C^`` with: ``cost_margin + margin_z sigma_j / sqrt(margin_n)``,
    each constraint's in its own units (docs/method.md §2a.4); ``margin_z = 0``: ``cost_margin``."""
    return hp.cost_margin + hp.margin_z * spread_sigma(spread) / jnp.sqrt(hp.margin_n)


def dual_estimates(key, env, env_params, actor, critic, params, cfg, hp, env_xi=None):
    """What the dual phase's ascent steps read, as ``cfg.dual_estimator`` says: ``(C^ of the
    whole batch (m,), one estimate per step [K_max, m] or None (every step reads C^),
    environment steps spent, (the whole episodes' values [N, m], their weights [N]))``.
    ``env_xi``: the rollout envs' kernels, which the multiplier batch's envs take in turn
    (methods with per-env kernels). Each constraint's own discount ``gamma_c`` is read here
    only (``rollout.value_discounts``: ``gamma`` for V, then each ``gamma_c``; a scalar where the
    environment has none of its own) and serves every estimator."""
    dropout = cfg.act_dropout or cfg.dual_dropout
    discounts = value_discounts(env, hp.gamma)
    gamma_c = discounts if jnp.ndim(discounts) == 0 else discounts[1:]
    if cfg.dual_estimator == "start_value":
        _, c_eps, n_dual = run_episodes(key, env, env_params, actor, params["actor"], cfg.n_dual_episodes, discounts,
                                        cfg.dual_deterministic, dropout)  # fmt: skip
        return c_eps.mean(0), None, n_dual, (c_eps, jnp.ones(c_eps.shape[:1], jnp.float32))
    k_batch, k_shuffle = jax.random.split(key)
    values, episodes = multiplier_batch(k_batch, env, env_params, actor, critic, params, cfg, hp, dropout, gamma_c,
                                        env_xi)  # fmt: skip
    estimates = minibatch_means(k_shuffle, values, cfg.dual_epochs, cfg.dual_minibatch)
    return values.mean(0), estimates, jnp.float32(cfg.dual_batch), episodes


def reading(dual, c_hat, estimates, episodes, hp):
    """The one reading every rule receives: ``(C^ + margin, estimates + margin or None, the
    spread's moments, the margin (m,))``, the margin (``margin_of``) from the moments updated
    with this iteration's whole episodes ``episodes = (values, weights)``; applied here only."""
    spread = track_spread(jnp.zeros((3,) + c_hat.shape, jnp.float32) if dual.spread is None else dual.spread,
                          *episodes)  # fmt: skip
    margin = margin_of(spread, hp)
    return c_hat + margin, None if estimates is None else estimates + margin, spread, margin


def dual_phase(key, env, actor, critic, params, dual, env_params, cfg, hp, rule, policy_epochs, env_xi=None):
    """5. ``K`` ascent steps of the lane's constraint rule (code ``rule``) on ``lam`` (the
    ``DualState`` ``dual``) under the kernel ``env_params`` (no step, and no steps counted,
    for a rule without a dual phase): ``(dual state, dual steps, K)``. ``C^`` is read as
    ``cfg.dual_estimator`` says (``dual_estimates``; ``env_xi``: the rollout envs' kernels,
    for methods with per-env kernels). ``policy_epochs``: the policy epochs this iteration
    ran (``dual_epochs_from_policy``: PPO on CartPole runs as many dual epochs). The samples
    are drawn for every rule: under a ``lax.cond`` whose predicate is batched (a family),
    XLA's simplifier loops on the PPO program."""
    active = constraints.has_dual(rule)
    if cfg.dual_epochs_from_policy:  # PPO on CartPole: as many dual epochs as policy epochs ran
        n_epochs = jnp.minimum(policy_epochs, cfg.dual_epochs).astype(jnp.int32)
    else:
        n_epochs = jnp.int32(cfg.dual_epochs)
    n_ascent = jnp.where(active, n_epochs * cfg.dual_steps_per_epoch, 0)
    c_hat, estimates, n_dual, episodes = dual_estimates(key, env, env_params, actor, critic, params, cfg, hp, env_xi)
    c_hat, estimates, spread, margin = reading(dual, c_hat, estimates, episodes, hp)
    dual = constraints.update(rule, dual.replace(spread=spread, margin=margin), c_hat, hp, n_ascent, estimates, cfg=cfg)
    return dual, jnp.where(active, n_dual, 0.0), n_ascent
