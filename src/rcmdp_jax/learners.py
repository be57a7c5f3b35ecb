"""Policy learners (SPEC §2b): the PPO and MDPO losses, the critic loss, and the
epoch/minibatch update loop with PPO's target-KL early stop (masked, inside jit).
MCPMD uses the MDPO loss with Monte-Carlo advantages and one full-batch step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rcmdp_jax.advantages import normalise
from rcmdp_jax.schedules import ScheduleState, alpha_value


@struct.dataclass
class Batch:
    """A flattened training batch, leaves ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array
    old_log_prob: jax.Array
    advantage: jax.Array  # Lagrangian advantage A_L
    targets: jax.Array  # (1 + m) critic targets


def reference_kl(log_ratio: jax.Array) -> jax.Array:
    """Per-sample ``exp(r) - 1 - r`` with ``r = log pi_theta - log pi_k``; under samples of
    ``pi_k`` its mean estimates ``KL(pi_k || pi_theta)`` (the reference study's term)."""
    return jnp.exp(log_ratio) - 1.0 - log_ratio


def ppo_loss(log_ratio: jax.Array, adv: jax.Array, clip_eps: jax.Array) -> jax.Array:
    """Clipped surrogate, negated: ``-mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A))``."""
    ratio = jnp.exp(log_ratio)
    return -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))


def mdpo_loss(log_ratio: jax.Array, adv: jax.Array, kl: jax.Array, alpha: jax.Array) -> jax.Array:
    """MDPO objective, negated: ``-(mean(rho A) - alpha * mean(KL))``."""
    return -(jnp.mean(jnp.exp(log_ratio) * adv) - alpha * jnp.mean(kl))


def critic_loss(values: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean squared error over all ``1 + m`` heads."""
    return jnp.mean((values - targets) ** 2)


def make_optimizer(kind: str, lr) -> optax.GradientTransformation:
    base = optax.adam if kind == "adam" else optax.sgd
    return optax.inject_hyperparams(base)(learning_rate=lr)


def total_loss(params, mb: Batch, key, alpha, old_actor_params, actor, critic, cfg, hp):
    k_a, k_c = jax.random.split(key)
    dist = actor.apply(params["actor"], mb.obs, train=True, rngs={"dropout": k_a})
    log_prob = dist.log_prob(mb.action)
    log_ratio = log_prob - mb.old_log_prob
    adv = normalise(mb.advantage) if cfg.normalize_advantages else mb.advantage
    if cfg.learner == "ppo":
        pl = ppo_loss(log_ratio, adv, hp.clip_eps)
    else:
        if cfg.kl_estimator == "exact":
            kl = dist.kl_divergence(actor.apply(old_actor_params, mb.obs))
        else:
            kl = reference_kl(log_ratio)
        pl = mdpo_loss(log_ratio, adv, kl, alpha)
    pl = pl - hp.ent_coef * jnp.mean(dist.entropy())
    values = critic.apply(params["critic"], mb.obs, train=True, rngs={"dropout": k_c})
    vl = critic_loss(values, mb.targets)
    return pl + hp.vf_coef * vl, dict(policy_loss=pl, critic_loss=vl)


def approx_kl(actor, actor_params, mb: Batch) -> jax.Array:
    """``mean(exp(r) - 1 - r)`` of the current policy (dropout off) to the behaviour
    policy on the minibatch: the quantity PPO's early stop compares to ``1.5 * target_kl``.
    Dropout is off so the check measures policy change, not dropout noise."""
    log_prob = actor.apply(actor_params, mb.obs).log_prob(mb.action)
    return jnp.mean(reference_kl(log_prob - mb.old_log_prob))


def update(key, params, opt_state, sched: ScheduleState, batch: Batch, actor, critic, tx, cfg, hp):
    """``cfg.epochs`` passes over ``batch`` in shuffled minibatches.

    The passes run as one ``lax.while_loop`` over minibatch steps, so PPO's early
    stop (minibatch approximate KL above ``1.5 * target_kl``, checked before each
    step) really ends the work, also under ``vmap`` once every member has stopped.
    The reported ``approx_kl`` is that of the updated policy to the behaviour
    policy over the whole batch (dropout off). The alpha schedule ticks
    after each epoch when ``alpha_tick == "epoch"``.
    Returns ``(params, opt_state, sched, metrics)``.
    """
    n = batch.obs.shape[0]
    n_mb, mb_size, epochs = cfg.num_minibatches, cfg.minibatch_size, cfg.epochs
    total = epochs * n_mb
    old_actor_params = params["actor"]
    grad_fn = jax.value_and_grad(total_loss, has_aux=True)
    k_perm, k_drop = jax.random.split(key)
    perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_perm, epochs))
    per_epoch = cfg.alpha_tick == "epoch"
    alphas = jax.vmap(
        lambda e: alpha_value(
            cfg.alpha_schedule, sched.replace(tick=sched.tick + e * per_epoch),
            hp.alpha, hp.alpha_decay, cfg.alpha_ticks_total,
        )
    )(jnp.arange(epochs))  # fmt: skip
    zero = jnp.zeros((), jnp.float32)
    sums0 = dict(policy_loss=zero, critic_loss=zero, n_updates=zero)

    def cond(carry):
        j, _, _, stopped, _ = carry
        return jnp.logical_and(j < total, jnp.logical_not(stopped))

    def body(carry):
        j, params, opt_state, _, sums = carry
        e, i = j // n_mb, j % n_mb
        idx = jax.lax.dynamic_slice(perms[e], (i * mb_size,), (mb_size,))
        mb = jax.tree.map(lambda x: x[idx], batch)

        def step(_):
            k = jax.random.fold_in(k_drop, j)
            (_, aux), grads = grad_fn(params, mb, k, alphas[e], old_actor_params, actor, critic, cfg, hp)
            updates, new_opt = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), new_opt, aux

        def skip(_):
            return params, opt_state, dict(policy_loss=zero, critic_loss=zero)

        if cfg.learner == "ppo":  # early stop: check the KL before each minibatch step
            stop = approx_kl(actor, params["actor"], mb) > 1.5 * hp.target_kl
            params, opt_state, aux = jax.lax.cond(stop, skip, step, None)
        else:  # MDPO / MCPMD never stop early: no check, no branch
            stop = jnp.bool_(False)
            params, opt_state, aux = step(None)
        live = 1.0 - stop.astype(jnp.float32)
        add = aux | {"n_updates": live}
        sums = {k: sums[k] + add[k] for k in sums}
        return j + 1, params, opt_state, stop, sums

    _, params, opt_state, _, sums = jax.lax.while_loop(
        cond, body, (jnp.int32(0), params, opt_state, jnp.bool_(False), sums0)
    )
    if per_epoch:
        sched = sched.replace(tick=sched.tick + epochs)
    n_updates = sums.pop("n_updates")
    metrics = {k: v / jnp.maximum(n_updates, 1.0) for k, v in sums.items()}
    metrics["n_updates"] = n_updates
    metrics["alpha"] = alphas[0]
    metrics["approx_kl"] = approx_kl(actor, params["actor"], batch)  # updated policy vs behaviour
    return params, opt_state, sched, metrics
