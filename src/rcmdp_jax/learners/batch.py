"""What PPO and MDPO share (docs/method.md §2b): a batch of ``n_envs x n_steps`` auto-resetting
steps, the Lagrangian GAE signal, and epochs of shuffled minibatch steps with PPO's
target-KL early stop (inside jit). A batch learner writes only its ``policy_loss``
(``ppo.py``, ``mdpo.py``); the losses themselves are ``rcmdp_jax.losses``."""

from __future__ import annotations

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct

from rcmdp_jax import losses
from rcmdp_jax.advantages import gae, normalise
from rcmdp_jax.constraints import lagrangian_reward
from rcmdp_jax.learners.base import Learner
from rcmdp_jax.rollout import collect_rollout, value_discounts
from rcmdp_jax.schedules import Schedule, ScheduleState, alpha_ticks_total, alpha_value


@struct.dataclass
class Batch:
    """A flattened training batch, leaves ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array
    old_log_prob: jax.Array
    advantage: jax.Array  # Lagrangian advantage A_L
    targets: jax.Array  # (1 + m) critic targets


@struct.dataclass
class PolicyTerms:
    """What a policy loss reads on one minibatch: the current policy ``dist`` (dropout on),
    ``log_ratio = log pi_theta - log pi_k`` and the (normalised) ``advantage`` ``[N]``, the
    ``obs``, the epoch's ``alpha`` and the behaviour policy's ``old_actor_params``."""

    dist: distrax.Distribution
    log_ratio: jax.Array
    advantage: jax.Array
    obs: jax.Array
    alpha: jax.Array
    old_actor_params: dict


def episode_means(ep: dict) -> dict:
    """The rollout's completed-episode sums (``collect_rollout``) as per-episode means (NaN
    when no episode ended), and the count."""
    n_ep = ep["episodes"]
    per_episode = lambda x: jnp.where(n_ep > 0, x / jnp.maximum(n_ep, 1.0), jnp.nan)
    return dict(
        episode_return=per_episode(ep["ret"]),
        episode_disc_return=per_episode(ep["disc_ret"]),
        episode_costs=per_episode(ep["disc_costs"]),
        episode_ep_cost=per_episode(ep["ep_costs"]),
        episodes_completed=n_ep,
    )


def lagrangian_gae(critic, critic_params, data, lam_tilde, hp, env=None, weights=None) -> tuple[jax.Array, jax.Array]:
    """GAE of the reward and every cost head (``[T, B, 1 + m]``; each cost by its ``gamma_c``
    when ``env`` has its own, ``rollout.value_discounts``), combined into the Lagrangian
    advantage ``A_L = A_r - lam~ . A_c`` ``[T, B]``; and the critic targets. ``weights``
    ``[B, 1 + m]``: env ``b``'s advantages of the reward and each cost weighted so
    (``Learner.signal``)."""
    rewards = jnp.concatenate([data.reward[..., None], data.costs], axis=-1)
    values = critic.apply(critic_params, data.obs)
    next_values = critic.apply(critic_params, data.next_obs)
    gamma = value_discounts(env, hp.gamma)
    adv, targets = gae(rewards, values, next_values, data.terminated, data.done, gamma, hp.gae_lambda)
    if weights is not None:
        adv = adv * weights
    return lagrangian_reward(adv[..., 0], adv[..., 1:], lam_tilde), targets


class BatchLearner(Learner):
    """A learner of batches of auto-resetting steps; a subclass gives ``policy_loss`` and
    PPO its ``kl_stop`` ("sb3", "dropout_off", or None: no early stop)."""

    per_env_kernels = True  # ``collect`` runs ``state.env_xi`` and takes ``fresh_xi``

    @property
    def kl_stop(self) -> str | None:
        return None

    def policy_loss(self, terms: PolicyTerms, hp) -> jax.Array:
        """The policy's loss on one minibatch (scalar), before the entropy bonus."""
        raise NotImplementedError

    def collect(self, key, state, hp, per_env: bool = False, fresh_xi=None):
        """1. ``n_envs x n_steps`` auto-resetting steps under the current kernel (``per_env``:
        each env under its own, ``state.env_xi``, which becomes ``fresh_xi[t]`` where an
        episode ends at step ``t``). Returns ``(transitions [T, B], state, episode metrics)``."""
        out = collect_rollout(
            key, self.env, state.env_params, self.actor, state.params["actor"], state.env_state,
            state.obs, state.episodes, self.cfg.n_steps, hp.gamma,
            env_xi=state.env_xi if per_env else None, fresh_xi=fresh_xi if per_env else None,
        )  # fmt: skip
        traj, env_state, obs, episodes, ep = out[:5]
        if len(out) == 6:
            state = state.replace(env_xi=out[5])
        return traj, state.replace(env_state=env_state, obs=obs, episodes=episodes), episode_means(ep)

    def signal(self, data, params, lam_tilde, hp, weights=None):
        """2. The Lagrangian GAE advantage ``A_L [T, B]`` and critic targets ``[T, B, 1 + m]``."""
        return lagrangian_gae(self.critic, params["critic"], data, lam_tilde, hp, self.env, weights)

    def update(self, key, state, data, signal, hp, schedule):
        """3. The policy and critic update (``epochs``). Returns ``(state, policy steps, metrics)``."""
        adv, targets = signal
        flat = lambda x: x.reshape((-1,) + x.shape[2:])
        batch = Batch(flat(data.obs), flat(data.action), flat(data.log_prob), flat(adv), flat(targets))
        params, opt_state, sched, upd = self.epochs(key, state.params, state.opt_state, state.schedule, batch, hp,
                                                    schedule)  # fmt: skip
        state = state.replace(params=params, opt_state=opt_state, schedule=sched)
        return state, jnp.float32(self.cfg.batch_size), upd

    def loss(self, params, mb: Batch, key, alpha, old_actor_params, hp):
        """The policy loss plus the critic's on minibatch ``mb`` (dropout on, keys from
        ``key``); returns ``(loss, aux)`` with SB3's ``approx_kl`` of this pass."""
        k_a, k_c = jax.random.split(key)
        dist = self.actor.apply(params["actor"], mb.obs, train=True, rngs={"dropout": k_a})
        log_ratio = dist.log_prob(mb.action) - mb.old_log_prob
        adv = normalise(mb.advantage) if self.cfg.normalize_advantages else mb.advantage
        pl = self.policy_loss(PolicyTerms(dist, log_ratio, adv, mb.obs, alpha, old_actor_params), hp)
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
        tx = self.optimizer(hp)
        k_perm, k_drop = jax.random.split(key)
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_perm, epochs))
        per_epoch = schedule.per_epoch()
        big_k = alpha_ticks_total(schedule, epochs)
        alphas = jax.vmap(
            lambda e: alpha_value(schedule.kind, sched.replace(tick=sched.tick + e * per_epoch), hp.alpha,
                                  hp.alpha_decay, big_k)
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
            k = jax.random.fold_in(k_drop, j)

            def loss_and_grads():
                (_, aux), grads = grad_fn(params, mb, k, alphas[e], old_actor_params, hp)
                return aux, grads

            def apply(grads):
                updates, new_opt = tx.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), new_opt

            if self.kl_stop == "sb3":  # KL of the same (dropout-on) pass, before the step
                aux, grads = loss_and_grads()
                stop = aux["approx_kl"] > 1.5 * hp.target_kl
                new_params, new_opt = apply(grads)
                keep = lambda a, b: jax.tree.map(lambda x, y: jnp.where(stop, x, y), a, b)
                params, opt_state = keep(params, new_params), keep(opt_state, new_opt)
            elif self.kl_stop == "dropout_off":  # a separate dropout-off check; the step is skipped when it stops
                stop = self.approx_kl(params["actor"], mb) > 1.5 * hp.target_kl

                def step(_):
                    aux, grads = loss_and_grads()
                    return (*apply(grads), aux)

                def skip(_):
                    return params, opt_state, dict(policy_loss=zero, critic_loss=zero, approx_kl=zero)

                params, opt_state, aux = jax.lax.cond(stop, skip, step, None)
            else:  # no early stop (MDPO): no check, no branch
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
