"""The learners' update loops (SPEC §2b): PPO/MDPO's epochs of shuffled minibatch
steps with PPO's target-KL early stop (inside jit), and MCPMD's one-episode
REINFORCE step. ``Learner`` binds the networks and the static choices once; the
losses themselves are ``rcmdp_jax.losses``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from rcmdp_jax import losses
from rcmdp_jax.advantages import normalise
from rcmdp_jax.schedules import Schedule, ScheduleState, alpha_ticks_total, alpha_value


@struct.dataclass
class Batch:
    """A flattened training batch, leaves ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array
    old_log_prob: jax.Array
    advantage: jax.Array  # Lagrangian advantage A_L
    targets: jax.Array  # (1 + m) critic targets


def make_optimizer(cfg, lr) -> optax.GradientTransformation:
    """Adam (eps ``cfg.adam_eps``) or SGD at learning rate ``lr`` (may be traced), after
    a global gradient-norm clip at ``cfg.max_grad_norm`` (none when infinite)."""
    if cfg.optimizer == "adam":
        base = optax.inject_hyperparams(optax.adam)(learning_rate=lr, eps=cfg.adam_eps)
    else:
        base = optax.inject_hyperparams(optax.sgd)(learning_rate=lr)
    if math.isinf(cfg.max_grad_norm):
        return base
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), base)


@dataclasses.dataclass(frozen=True)
class Learner:
    """The policy and critic updates of one configuration: ``actor``, ``critic`` (flax
    modules) and ``cfg`` (the static choices) bound once."""

    actor: Any
    critic: Any
    cfg: Any  # rcmdp_jax.Config

    def optimizer(self, lr) -> optax.GradientTransformation:
        return make_optimizer(self.cfg, lr)

    def loss(self, params, mb: Batch, key, alpha, old_actor_params, hp):
        """PPO's or MDPO's loss plus the critic's on minibatch ``mb`` (dropout on, keys
        from ``key``); returns ``(loss, aux)`` with SB3's ``approx_kl`` of this pass."""
        k_a, k_c = jax.random.split(key)
        dist = self.actor.apply(params["actor"], mb.obs, train=True, rngs={"dropout": k_a})
        log_ratio = dist.log_prob(mb.action) - mb.old_log_prob
        adv = normalise(mb.advantage) if self.cfg.normalize_advantages else mb.advantage
        if self.cfg.learner == "ppo":
            pl = losses.ppo_loss(log_ratio, adv, hp.clip_eps)
        else:
            if self.cfg.kl_estimator == "exact":
                kl = losses.exact_kl(dist, self.actor.apply(old_actor_params, mb.obs))
            else:
                kl = losses.reference_kl(log_ratio)
            pl = losses.mdpo_loss(log_ratio, adv, kl, alpha)
        pl = pl - hp.ent_coef * jnp.mean(dist.entropy())
        values = self.critic.apply(params["critic"], mb.obs, train=True, rngs={"dropout": k_c})
        vl = losses.critic_loss(values, mb.targets)
        kl = jax.lax.stop_gradient(jnp.mean(losses.reference_kl(log_ratio)))  # SB3's approx_kl, dropout on
        return pl + hp.vf_coef * vl, dict(policy_loss=pl, critic_loss=vl, approx_kl=kl)

    def approx_kl(self, actor_params, mb: Batch) -> jax.Array:
        """``mean(exp(r) - 1 - r)`` of the current policy (dropout off) to the behaviour
        policy on ``mb``: the early-stop check of ``kl_check="dropout_off"`` (policy
        change without dropout noise), and the reported ``approx_kl``."""
        log_prob = self.actor.apply(actor_params, mb.obs).log_prob(mb.action)
        return jnp.mean(losses.reference_kl(log_prob - mb.old_log_prob))

    def epochs(self, key, params, opt_state, sched: ScheduleState, batch: Batch, hp, schedule: Schedule):
        """``cfg.epochs`` passes over ``batch`` in shuffled minibatches.

        The passes run as one ``lax.while_loop`` over minibatch steps, so PPO's early
        stop (minibatch approximate KL above ``1.5 * target_kl``, checked before each
        step) really ends the work, also under ``vmap`` once every member has stopped.
        ``kl_check="sb3"`` takes that KL from the loss's own forward pass (dropout on),
        as Stable-Baselines3 does; ``"dropout_off"`` from a separate dropout-off pass.
        ``schedule``: alpha's ``schedules.Schedule`` (codes may be traced); each epoch
        uses its own alpha, and the schedule ticks after each epoch when it ticks per epoch.
        Returns ``(params, opt_state, sched, metrics)``; ``metrics["policy_epochs"]`` is the
        number of epochs begun before the stop (all of them without one), the
        reported ``approx_kl`` that of the updated policy over the whole batch (dropout off).
        """
        cfg = self.cfg
        n = batch.obs.shape[0]
        n_mb, mb_size, epochs = cfg.num_minibatches, cfg.minibatch_size, cfg.epochs
        total = epochs * n_mb
        old_actor_params = params["actor"]
        grad_fn = jax.value_and_grad(self.loss, has_aux=True)
        tx = self.optimizer(hp.lr)
        k_perm, k_drop = jax.random.split(key)
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_perm, epochs))
        per_epoch = schedule.per_epoch()
        big_k = alpha_ticks_total(schedule, cfg.num_iterations, epochs)
        alphas = jax.vmap(
            lambda e: alpha_value(schedule.kind, sched.replace(tick=sched.tick + e * per_epoch), hp.alpha,
                                  hp.alpha_decay, big_k)
        )(jnp.arange(epochs))  # fmt: skip
        zero = jnp.zeros((), jnp.float32)
        sums0 = dict(policy_loss=zero, critic_loss=zero, n_updates=zero)
        ppo = cfg.learner == "ppo"

        def cond(carry):
            j, _, _, stopped, _ = carry
            return jnp.logical_and(j < total, jnp.logical_not(stopped))

        def body(carry):
            j, params, opt_state, _, sums = carry
            e, i = j // n_mb, j % n_mb
            idx = jax.lax.dynamic_slice(perms[e], (i * mb_size,), (mb_size,))
            mb = jax.tree.map(lambda x: x[idx], batch)
            k = jax.random.fold_in(k_drop, j)

            def loss_and_grads():
                (_, aux), grads = grad_fn(params, mb, k, alphas[e], old_actor_params, hp)
                return aux, grads

            def apply(grads):
                updates, new_opt = tx.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), new_opt

            if ppo and cfg.kl_check == "sb3":  # KL of the same (dropout-on) pass, before the step
                aux, grads = loss_and_grads()
                stop = aux["approx_kl"] > 1.5 * hp.target_kl
                new_params, new_opt = apply(grads)
                keep = lambda a, b: jax.tree.map(lambda x, y: jnp.where(stop, x, y), a, b)  # noqa: E731
                params, opt_state = keep(params, new_params), keep(opt_state, new_opt)
            elif ppo:  # a separate dropout-off check; the step is skipped when it stops
                stop = self.approx_kl(params["actor"], mb) > 1.5 * hp.target_kl

                def step(_):
                    aux, grads = loss_and_grads()
                    return (*apply(grads), aux)

                def skip(_):
                    return params, opt_state, dict(policy_loss=zero, critic_loss=zero, approx_kl=zero)

                params, opt_state, aux = jax.lax.cond(stop, skip, step, None)
            else:  # MDPO never stops early: no check, no branch
                stop = jnp.bool_(False)
                aux, grads = loss_and_grads()
                params, opt_state = apply(grads)
            live = 1.0 - stop.astype(jnp.float32)
            sums = dict(
                policy_loss=sums["policy_loss"] + live * aux["policy_loss"],
                critic_loss=sums["critic_loss"] + live * aux["critic_loss"],
                n_updates=sums["n_updates"] + live,
            )
            return j + 1, params, opt_state, stop, sums

        j_end, params, opt_state, _, sums = jax.lax.while_loop(
            cond, body, (jnp.int32(0), params, opt_state, jnp.bool_(False), sums0)
        )
        sched = sched.replace(tick=sched.tick + epochs * per_epoch)
        n_updates = sums.pop("n_updates")
        metrics = {k: v / jnp.maximum(n_updates, 1.0) for k, v in sums.items()}
        metrics["n_updates"] = n_updates
        metrics["policy_epochs"] = ((j_end + n_mb - 1) // n_mb).astype(jnp.float32)
        metrics["alpha"] = alphas[0]
        metrics["approx_kl"] = self.approx_kl(params["actor"], batch)  # updated policy vs behaviour
        return params, opt_state, sched, metrics

    def reinforce(self, params, opt_state, episode, returns: jax.Array, hp):
        """MCPMD's step (SPEC §2b): one optimizer step of ``reinforce_loss`` on one whole
        episode. The log-probabilities are recomputed with each step's own dropout key,
        so they (and their gradients) are those of the dropout-perturbed policy that
        acted. ``episode``: ``rollout.Episode`` (leaves ``[T, ...]``); ``returns`` ``[T]``
        the Lagrangian returns-to-go. Returns ``(params, opt_state, metrics)``."""
        actor = self.actor
        g = losses.normalise_episode(returns, episode.alive)

        def loss(actor_params):
            def log_prob(obs, action, k):
                return actor.apply(actor_params, obs, train=True, rngs={"dropout": k}).log_prob(action)

            lp = jax.vmap(log_prob)(episode.obs, episode.action, episode.dropout_key)
            return losses.reinforce_loss(lp, g, episode.alive)

        pl, grads = jax.value_and_grad(loss)(params["actor"])
        grads = {"actor": grads, "critic": jax.tree.map(jnp.zeros_like, params["critic"])}
        updates, opt_state = self.optimizer(hp.lr).update(grads, opt_state, params)
        deterministic_lp = lambda p: jax.vmap(lambda o, a: actor.apply(p, o).log_prob(a))(episode.obs, episode.action)  # noqa: E731
        old_lp = deterministic_lp(params["actor"])
        params = optax.apply_updates(params, updates)
        n = jnp.maximum(episode.alive.sum(), 1.0)
        kl = jnp.sum(episode.alive * losses.reference_kl(deterministic_lp(params["actor"]) - old_lp)) / n
        metrics = dict(policy_loss=pl, critic_loss=jnp.float32(0.0), n_updates=jnp.float32(1.0),
                       policy_epochs=jnp.float32(1.0), approx_kl=kl)  # fmt: skip
        return params, opt_state, metrics
