"""Constraint handling: the multiplier the learners see, and the dual updates (docs/method.md §2a.4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax.advantages import discounted_returns, gae
from rcmdp_jax.rollout import collect_rollout, init_accumulator, per_env_params


@struct.dataclass
class DualState:
    lam: jax.Array  # (m,) Lagrange multipliers
    c_hat: jax.Array  # (m,) last Monte-Carlo estimate of the discounted constraint values


def init_dual(m: int, lam_init: jax.Array) -> DualState:
    return DualState(lam=jnp.full((m,), lam_init, jnp.float32), c_hat=jnp.zeros((m,), jnp.float32))


# Integer codes of the constraint modes: the mode is a (traced) array in the train step,
# so algorithms with different modes share one vmapped program (``rcmdp_jax.family``).
MODE_CODES = {"none": 0, "lagrangian": 1, "augmented": 2}


def mode_code(mode) -> jax.Array:
    """The ``MODE_CODES`` code of ``mode``: a name, or a code already (may be traced)."""
    return jnp.int32(MODE_CODES[mode]) if isinstance(mode, str) else jnp.asarray(mode, jnp.int32)


def effective_multiplier(mode, dual: DualState, eta_lam: jax.Array) -> jax.Array:
    """``lam~``: ``0`` (none), ``lam`` (lagrangian), ``lam + eta_lam * C^`` (augmented).
    ``mode``: a name or a ``MODE_CODES`` code (may be traced: ``lax.switch``)."""
    branches = [
        lambda: jnp.zeros_like(dual.lam),
        lambda: dual.lam,
        lambda: dual.lam + eta_lam * dual.c_hat,
    ]
    return jax.lax.switch(mode_code(mode), branches)


def lagrangian_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array, lam_clip: jax.Array) -> jax.Array:
    """One ascent step ``lam <- clip(lam + eta_lam * C^, 0, lam_clip)``."""
    return jnp.clip(lam + eta_lam * c_hat, 0.0, lam_clip)


def augmented_step(lam: jax.Array, c_hat: jax.Array, eta_lam: jax.Array) -> jax.Array:
    """One augmented step ``lam <- max(-eta_lam * C^, lam + eta_lam * C^)`` (no clipping)."""
    return jnp.maximum(-eta_lam * c_hat, lam + eta_lam * c_hat)


def ascent(step, lam: jax.Array, n_steps, estimates: jax.Array | None = None) -> jax.Array:
    """``n_steps`` applications of ``step(lam, c)`` (``n_steps`` may be traced): with
    ``estimates = None`` every step sees the same ``c`` (``step`` ignores it); else step
    ``i`` sees ``estimates[i]`` (``[K_max, m]``, steps past ``n_steps`` are skipped)."""
    if estimates is None:
        return jax.lax.fori_loop(0, n_steps, lambda _, x: step(x, None), lam)

    def body(x, ic):
        i, c = ic
        return jnp.where(i < n_steps, step(x, c), x), None

    return jax.lax.scan(body, lam, (jnp.arange(estimates.shape[0]), estimates))[0]


def dual_step(mode, dual: DualState, c_hat: jax.Array, hp, n_steps, estimates: jax.Array | None = None) -> DualState:
    """The dual phase of one iteration (docs/method.md §2a.4): ``n_steps`` (``K = dual_epochs x
    ceil(dual_batch / dual_minibatch)``) ascent steps of the mode's rule, each with the
    batch estimate ``c_hat`` or, given ``estimates`` (``[K_max, m]``), step ``i`` with
    its minibatch's ``estimates[i]``; ``c_hat`` is stored for the next ``lam~``. Mode
    "none" leaves the state as it is. ``mode``: a name or a (traced) code; ``n_steps``
    may be traced."""

    def c(x):
        return c_hat if x is None else x

    branches = [
        lambda: dual,
        lambda: DualState(
            ascent(lambda x, e: lagrangian_step(x, c(e), hp.eta_lam, hp.lam_clip), dual.lam, n_steps, estimates), c_hat
        ),
        lambda: DualState(
            ascent(lambda x, e: augmented_step(x, c(e), hp.eta_lam), dual.lam, n_steps, estimates), c_hat
        ),
    ]
    return jax.lax.switch(mode_code(mode), branches)


# ----------------------------------------------------------------- the multiplier batch
# How the dual phase estimates the constraint value C^ (docs/method.md §2a.4 leaves it open;
# ``docs/sensitivity.md`` compares the readings). "start_value": the start state's
# discounted cost value V_c(rho) from fresh episodes, the same for every step. The
# others read the multiplier batch (``n_dual_episodes`` auto-resetting envs x
# ``dual_batch / n_dual_episodes`` steps from fresh starts), one value per time step,
# and each ascent step uses one shuffled minibatch's mean of them: "step_cost" the
# per-step costs, "cost_to_go" the discounted cost-to-go G_t inside the batch (cut at
# its end), "gae" the critic's GAE cost returns (bootstrapped at the cut).
DUAL_ESTIMATORS = ("start_value", "step_cost", "cost_to_go", "gae")


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


def multiplier_batch(key, env, env_params, actor, critic, params, cfg, hp, dropout: bool, env_xi=None) -> jax.Array:
    """The multiplier batch's per-time-step readings of the constraint values (``cfg.
    dual_estimator``), ``[dual_batch, m]``: ``n_dual_episodes`` auto-resetting envs from
    fresh starts, ``dual_batch / n_dual_episodes`` steps each (docs/method.md §2a.4: 4 x 100);
    given ``env_xi`` (``[B, ...]``), env ``i`` runs kernel ``env_xi[i mod B]``."""
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
                           env_xi=env_xi)[0]  # fmt: skip
    v = v_next = None
    if cfg.dual_estimator == "gae":  # the critic's cost heads
        v = critic.apply(params["critic"], traj.obs)[..., 1:]
        v_next = critic.apply(params["critic"], traj.next_obs)[..., 1:]
    values = batch_readings(cfg.dual_estimator, traj.costs, traj.terminated, traj.done, v, v_next, hp.gamma,
                            hp.gae_lambda)  # fmt: skip
    return values.reshape(-1, env.num_constraints)
