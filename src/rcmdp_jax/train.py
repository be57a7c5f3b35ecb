"""``make_train``: one whole training run (SPEC §2a) as a pure, jit-able function."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax import envs
from rcmdp_jax import lagrange, schedules
from rcmdp_jax.advantages import discounted_returns, gae
from rcmdp_jax.config import Config, HParams, validate_hparams
from rcmdp_jax.learners import Batch, make_optimizer, reinforce_update, update
from rcmdp_jax.ltma import ltma_phase
from rcmdp_jax.networks import Actor, Critic
from rcmdp_jax.rollout import EpisodeAccumulator, collect_episode, collect_rollout, init_accumulator, run_episodes


@struct.dataclass
class TrainState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: Any
    dual: lagrange.DualState
    env_params: Any  # the current kernel (xi): the adversary's state
    schedule: schedules.ScheduleState
    env_state: Any  # the parallel rollout envs
    obs: jax.Array
    episodes: EpisodeAccumulator
    samples: jax.Array  # cumulative (policy, dual, LTMA) environment steps
    rng: jax.Array


@struct.dataclass
class TrainResult:
    state: TrainState
    metrics: dict  # per-iteration metrics, leading axis = iteration


@struct.dataclass
class Variant:
    """What may differ between the algorithms of one family (``rcmdp_jax.family``):
    the constraint mode, robustness and the alpha schedule. ``make_train`` passes
    Python values for the first two (a mode name and a bool: static branches, nothing
    extra compiled); a family passes arrays (a ``lagrange.MODE_CODES`` code and a bool
    flag per member: both paths computed, the member's selected), so several
    algorithms share one vmapped program. The schedule is always a pair of codes
    (``schedules.Schedule``): its candidates are scalar formulas."""

    constraint: Any
    robust: Any
    schedule: schedules.Schedule


def _is_static(x) -> bool:
    return isinstance(x, (str, bool))


def build_networks(cfg: Config, env) -> tuple[Actor, Critic]:
    actor = Actor(env.action_dim, tuple(cfg.policy_hidden), env.discrete, cfg.dropout, cfg.dropout_rng, cfg.init)
    critic = Critic(1 + env.num_constraints, tuple(cfg.critic_hidden), cfg.dropout, cfg.dropout_rng, cfg.init)
    return actor, critic


def resolve_hparams(cfg: Config, hparams: HParams | None) -> HParams:
    hp = cfg.hparams if hparams is None else hparams
    if not isinstance(hp, HParams):
        raise ValueError(f"hparams must be an rcmdp_jax.HParams, got {type(hp).__name__}")
    validate_hparams(hp)  # concrete values only; traced ones are checked where they are made
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hp)


def make_train(config: Config):
    """Validate ``config`` and return ``train(rng, hparams=None, env_params=None) -> TrainResult``.

    ``train`` is pure: ``jax.jit(jax.vmap(train))(jax.random.split(key, n))`` trains
    ``n`` seeds in one compiled call; vmapping ``hparams`` sweeps hyperparameters
    and vmapping ``env_params`` trains on a batch of kernels.
    """
    cfg = config.validate()
    env, default_env_params = envs.make(cfg.env)
    actor, critic = build_networks(cfg, env)
    m = env.num_constraints
    n_iter = cfg.num_iterations

    def init(rng, hp, env_params) -> TrainState:
        rng, k_a, k_c, k_env = jax.random.split(rng, 4)
        obs0 = jnp.zeros((env.state_dim,), jnp.float32)
        params = {"actor": actor.init(k_a, obs0), "critic": critic.init(k_c, obs0)}
        tx = make_optimizer(cfg, hp.lr)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(k_env, cfg.n_envs), env_params
        )
        return TrainState(
            params=params,
            opt_state=tx.init(params),
            dual=lagrange.init_dual(m, hp.lam_init),
            env_params=env_params,
            schedule=schedules.init_schedule(),
            env_state=env_state,
            obs=obs,
            episodes=init_accumulator(cfg.n_envs, m),
            samples=jnp.zeros((3,), jnp.float32),
            rng=rng,
        )

    def advantages(traj, params, lam_tilde, hp):
        """Lagrangian advantage ``A_L [T, B]`` and critic targets ``[T, B, 1 + m]``."""
        rewards = jnp.concatenate([traj.reward[..., None], traj.costs], axis=-1)
        values = critic.apply(params["critic"], traj.obs)
        next_values = critic.apply(params["critic"], traj.next_obs)
        adv, targets = gae(rewards, values, next_values, traj.terminated, traj.done, hp.gamma, hp.gae_lambda)
        return adv[..., 0] - adv[..., 1:] @ lam_tilde, targets

    def learn_on_batch(key, state, lam_tilde, hp, variant, tx):
        """Steps 1-2 for PPO/MDPO: a rollout of ``n_envs x n_steps`` auto-resetting steps,
        then epochs of minibatch updates on the Lagrangian GAE advantage."""
        k_roll, k_upd = jax.random.split(key)
        traj, env_state, obs, episodes, ep = collect_rollout(
            k_roll, env, state.env_params, actor, state.params["actor"], state.env_state,
            state.obs, state.episodes, cfg.n_steps, hp.gamma,
        )  # fmt: skip
        adv, targets = advantages(traj, state.params, lam_tilde, hp)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        batch = Batch(flat(traj.obs), flat(traj.action), flat(traj.log_prob), flat(adv), flat(targets))
        params, opt_state, sched, upd = update(
            k_upd, state.params, state.opt_state, state.schedule, batch, actor, critic, tx, cfg, hp, variant.schedule
        )
        n_ep = ep["episodes"]
        safe = jnp.maximum(n_ep, 1.0)
        nan_if_none = lambda x: jnp.where(n_ep > 0, x / safe, jnp.nan)  # noqa: E731
        ep_metrics = dict(
            episode_return=nan_if_none(ep["ret"]),
            episode_disc_return=nan_if_none(ep["disc_ret"]),
            episode_costs=nan_if_none(ep["disc_costs"]),
            episodes_completed=n_ep,
        )
        moved_on = state.replace(params=params, opt_state=opt_state, schedule=sched, env_state=env_state,
                                 obs=obs, episodes=episodes)  # fmt: skip
        return moved_on, jnp.float32(cfg.batch_size), ep_metrics | upd

    def learn_on_episode(key, state, lam_tilde, hp, variant, tx):
        """Steps 1-2 for MCPMD (SPEC §2b): one whole episode of one environment, acting
        in training mode (dropout on), then one REINFORCE step on the Lagrangian
        returns-to-go normalised within the episode."""
        episode = collect_episode(
            key, env, state.env_params, actor, state.params["actor"], env.episode_length, cfg.act_dropout
        )
        lagr_reward = (episode.reward - episode.costs @ lam_tilde) * episode.alive
        returns = discounted_returns(lagr_reward, jnp.zeros_like(episode.alive), hp.gamma)
        params, opt_state, upd = reinforce_update(state.params, state.opt_state, episode, returns, actor, tx)
        disc = hp.gamma ** jnp.arange(env.episode_length, dtype=jnp.float32) * episode.alive
        ep_metrics = dict(
            episode_return=jnp.sum(episode.reward * episode.alive),
            episode_disc_return=jnp.sum(episode.reward * disc),
            episode_costs=disc @ episode.costs,
            episodes_completed=jnp.float32(1.0),
        )
        upd = upd | {"alpha": jnp.asarray(hp.alpha, jnp.float32)}  # REINFORCE has no KL penalty: reported as set
        return state.replace(params=params, opt_state=opt_state), episode.alive.sum(), ep_metrics | upd

    def iteration(state: TrainState, it, hp, variant: Variant) -> tuple[TrainState, dict]:
        rng, k_learn, k_ltma, k_dual, k_eval = jax.random.split(state.rng, 5)
        tx = make_optimizer(cfg, hp.lr)
        lam_tilde = lagrange.effective_multiplier(variant.constraint, state.dual, hp.eta_lam)

        # 1-2. rollout under the current kernel, policy (+ critic) update on the Lagrangian signal
        learn = learn_on_episode if cfg.episodic else learn_on_batch
        learned, policy_steps, metrics = learn(k_learn, state, lam_tilde, hp, variant, tx)
        params, sched = learned.params, learned.schedule

        # 3. LTMA on xi (robust algorithms)
        env_params, ltma_steps = state.env_params, jnp.float32(0.0)
        if variant.robust is not False:
            attacked, n_ltma = ltma_phase(
                k_ltma, env, state.env_params, actor, params["actor"], lam_tilde, hp, cfg
            )
            if _is_static(variant.robust):
                env_params, ltma_steps = attacked, n_ltma
            else:  # a family member's flag: keep the nominal kernel when it is off
                keep = lambda a, b: jnp.where(variant.robust, a, b)  # noqa: E731
                env_params = jax.tree.map(keep, attacked, state.env_params)
                ltma_steps = keep(n_ltma, jnp.float32(0.0))
            moved = jnp.any(jnp.abs(env_params.xi - state.env_params.xi) > 0.5 * env_params.kappa)
            sched = schedules.maybe_restart(sched, moved)  # only the restart schedule reads it

        # 4. dual phase: K ascent steps from a fresh Monte-Carlo estimate under the current kernel
        dual, dual_steps = state.dual, jnp.float32(0.0)
        n_ascent = jnp.int32(0)
        if not _is_static(variant.constraint) or variant.constraint != "none":
            _, c_eps, n_dual = run_episodes(
                k_dual, env, env_params, actor, params["actor"], cfg.n_dual_episodes, hp.gamma, False, cfg.act_dropout
            )
            if cfg.dual_epochs_from_policy:  # PPO on CartPole: as many dual epochs as policy epochs ran
                epochs = jnp.minimum(metrics["policy_epochs"], cfg.dual_epochs).astype(jnp.int32)
                n_ascent = epochs * cfg.dual_steps_per_epoch
            else:
                n_ascent = jnp.int32(cfg.dual_steps)
            dual = lagrange.dual_step(variant.constraint, state.dual, c_eps.mean(0), hp, n_ascent)
            if _is_static(variant.constraint):
                dual_steps = n_dual
            else:
                active = variant.constraint != lagrange.MODE_CODES["none"]
                dual_steps = jnp.where(active, n_dual, 0.0)
                n_ascent = jnp.where(active, n_ascent, 0)

        sched = schedules.advance(sched, 1 - variant.schedule.per_epoch())  # per-batch ticks

        # 5. deterministic evaluation for the training curves
        def evaluate(_):
            v, c, _ = run_episodes(
                k_eval, env, env_params, actor, params["actor"], cfg.eval_episodes, hp.gamma, True
            )
            return v.mean(), c.mean(0)

        def skip(_):
            return jnp.float32(jnp.nan), jnp.full((m,), jnp.nan, jnp.float32)

        eval_v, eval_c = jax.lax.cond(it % cfg.eval_every == 0, evaluate, skip, None)

        samples = state.samples + jnp.stack(
            [policy_steps.astype(jnp.float32), dual_steps.astype(jnp.float32), ltma_steps.astype(jnp.float32)]
        )
        metrics = metrics | dict(
            lam=dual.lam,
            lam_tilde=lam_tilde,
            c_hat=dual.c_hat,
            dual_updates=n_ascent.astype(jnp.float32),
            xi=env_params.xi,
            eval_return=eval_v,
            eval_costs=eval_c,
            policy_steps=samples[0],
            dual_steps=samples[1],
            ltma_steps=samples[2],
            active=jnp.float32(1.0),
        )
        new_state = learned.replace(dual=dual, env_params=env_params, schedule=sched, samples=samples, rng=rng)
        return new_state, metrics

    def budgeted_iteration(state: TrainState, it, hp, variant: Variant) -> tuple[TrainState, dict]:
        """MCPMD's iteration slot: an iteration while policy steps remain in the budget,
        else nothing (``active = 0``; the state and the counters are carried over, the
        other metrics are NaN). It is a ``while_loop`` of at most one trip, so under
        ``vmap`` a slot costs nothing once every member has spent its budget."""
        shapes = jax.eval_shape(lambda s: iteration(s, it, hp, variant)[1], state)
        idle = jax.tree.map(lambda x: jnp.full(x.shape, jnp.nan, x.dtype), shapes)
        idle = idle | dict(
            lam=state.dual.lam, c_hat=state.dual.c_hat, xi=state.env_params.xi, active=jnp.float32(0.0),
            policy_steps=state.samples[0], dual_steps=state.samples[1], ltma_steps=state.samples[2],
        )  # fmt: skip

        def cond(carry):
            done, s, _ = carry
            return jnp.logical_and(jnp.logical_not(done), s.samples[0] < cfg.total_timesteps)

        def body(carry):
            _, s, _ = carry
            return (jnp.bool_(True), *iteration(s, it, hp, variant))

        _, state, metrics = jax.lax.while_loop(cond, body, (jnp.bool_(False), state, idle))
        return state, metrics

    def init_state(rng: jax.Array, hparams: HParams | None = None, env_params=None) -> TrainState:
        """The state before the first iteration."""
        env_params = default_env_params if env_params is None else env_params
        env.validate_params(env_params)
        env.validate_kernel(env_params)
        return init(rng, resolve_hparams(cfg, hparams), env_params)

    static_variant = Variant(
        constraint=cfg.constraint, robust=cfg.robust, schedule=schedules.Schedule.of(cfg.alpha_schedule, cfg.alpha_tick)
    )
    step = budgeted_iteration if cfg.episodic else iteration

    def run(state: TrainState, hparams: HParams | None = None, start=0, n: int = n_iter, variant=None):
        """Iterations ``start .. start + n - 1`` (``n`` static): ``(state, metrics)``.
        Running the iterations in chunks gives the same numbers as one call.
        ``variant`` (families only) overrides the config's constraint mode / robustness."""
        hp = resolve_hparams(cfg, hparams)
        v = static_variant if variant is None else variant
        its = start + jnp.arange(n)
        return jax.lax.scan(lambda s, it: step(s, it, hp, v), state, its)

    def train(rng: jax.Array, hparams: HParams | None = None, env_params=None) -> TrainResult:
        state = init_state(rng, hparams, env_params)
        state, metrics = run(state, hparams)
        return TrainResult(state=state, metrics=metrics)

    train.init = init_state  # type: ignore[attr-defined]
    train.run = run  # type: ignore[attr-defined]
    train.config = cfg  # type: ignore[attr-defined]
    train.env = env  # type: ignore[attr-defined]
    return train
