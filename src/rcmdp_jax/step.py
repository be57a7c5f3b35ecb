"""``Step``: one training iteration (docs/method.md §2a) of one program shape, and the train
state it carries.

The constraint rule, robust method and alpha schedule of an algorithm are arrays (a
``Variant``) selected inside the program by ``lax.switch`` / ``lax.cond``, so a family
(``rcmdp_jax.family``) is the same program vmapped over members, and one algorithm
(``train.make_train``) is a family of one.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax import adversary, constraints, envs, options, schedules
from rcmdp_jax.adversary.base import Context, broadcast, has_density, lanes_where, uniform_kernels
from rcmdp_jax.batching import only_where
from rcmdp_jax.config import Config
from rcmdp_jax.dual_batch import dual_estimates
from rcmdp_jax.hparams import HParams, hparams_ok
from rcmdp_jax.learners import UPDATE_METRICS, make_learner
from rcmdp_jax.networks import Actor, Critic
from rcmdp_jax.rollout import EpisodeAccumulator, init_accumulator, run_episodes


@struct.dataclass
class TrainState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: Any
    dual: constraints.DualState
    env_params: Any  # the current kernel (xi): the adversary's state
    env_xi: jax.Array  # [n_envs, *xi.shape] each rollout env's kernel (the adversary's unless per-env)
    schedule: schedules.ScheduleState
    env_state: Any  # the parallel rollout envs
    obs: jax.Array
    episodes: EpisodeAccumulator
    # cumulative (policy, dual, robust method) environment steps; the third is the metric
    # ``ltma_steps`` (the name kept for the golden runs and run folders), whatever the method
    samples: jax.Array
    rng: jax.Array


@struct.dataclass
class Variant:
    """What may differ between the algorithms of one family, as arrays: the constraint rule
    (``constraints.code``), the robust method (an index into the family's ``methods``,
    ``rcmdp_jax.adversary``) and the alpha schedule (``schedules.Schedule`` codes)."""

    constraint: jax.Array
    adversary: jax.Array
    schedule: schedules.Schedule

    @classmethod
    def of(cls, cfg: Config, methods: tuple[str, ...] | None = None) -> Variant:
        methods = adversary.family_methods([cfg]) if methods is None else methods
        return cls(
            constraint=jnp.int32(constraints.code(cfg.constraint)),
            adversary=jnp.int32(methods.index(adversary.method_of(cfg))),
            schedule=schedules.Schedule.of(cfg.alpha_schedule, cfg.alpha_tick),
        )


def build_networks(cfg: Config, env) -> tuple[Actor, Critic]:
    actor = Actor(env.action_dim, tuple(cfg.policy_hidden), env.discrete, cfg.dropout, cfg.dropout_rng, cfg.init)
    critic = Critic(1 + env.num_constraints, tuple(cfg.critic_hidden), cfg.dropout, cfg.dropout_rng, cfg.init)
    return actor, critic


def check_update_metrics(learner: str, metrics: dict) -> None:
    """Refuse (while tracing) a learner's ``update`` metrics without ``UPDATE_METRICS``."""
    missing = [k for k in UPDATE_METRICS if k not in metrics]
    if missing:
        raise ValueError(f"learner {learner}: update must return the metrics {', '.join(UPDATE_METRICS)}; "
                         f"missing {', '.join(missing)} (rcmdp_jax.learners.base.Learner.update)")  # fmt: skip


class Step:
    """The train step of one program shape (a config; its name, constraint rule,
    robust method, schedule and hyperparameters are not read here: they come as
    ``hp`` and ``variant``). Each phase of docs/method.md §2a is one method.
    ``methods``: the robust methods the program holds (``adversary.family_methods``; one
    algorithm's program holds its own only), chosen per lane by ``variant.adversary``."""

    def __init__(self, cfg: Config, methods: tuple[str, ...] | None = None):
        self.cfg = cfg
        self.methods = adversary.family_methods([cfg]) if methods is None else tuple(methods)
        self.adversaries = tuple(adversary.get(m) for m in self.methods)
        self.per_env = any(a.per_env for a in self.adversaries)  # rollout envs with kernels of their own
        self.env, self.default_env_params = envs.make(cfg.env)
        options.check_env(cfg, self.env, self.methods)  # each plug-in's own checks of the env
        self.actor, self.critic = build_networks(cfg, self.env)
        self.learner = make_learner(cfg, self.env, self.actor, self.critic)
        self.context = Context(self.env, self.actor, cfg, self.learner.episodic, score_ok=has_density(self.env))

    # ------------------------------------------------------------------ state
    def init(self, rng, hp: HParams, env_params, variant: Variant | None = None) -> TrainState:
        cfg, env = self.cfg, self.env
        rng, k_a, k_c, k_env = jax.random.split(rng, 4)
        env_xi = broadcast(env_params.xi, cfg.n_envs)
        if self.per_env and variant is not None:  # e.g. domain randomisation's first kernels
            k_xi = jax.random.fold_in(k_env, 1)
            for i, a in enumerate(self.adversaries):
                if a.per_env:
                    env_xi = jnp.where(variant.adversary == i, a.init_env_xi(k_xi, env_params, cfg.n_envs), env_xi)
        obs0 = jnp.zeros((env.obs_dim,), jnp.float32)
        params = {"actor": self.actor.init(k_a, obs0), "critic": self.critic.init(k_c, obs0)}
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, cfg.n_envs), env_params)
        return TrainState(
            params=params,
            opt_state=self.learner.optimizer(hp.lr).init(params),
            dual=constraints.init_dual(env.num_constraints, hp.lam_init),
            env_params=env_params,
            env_xi=env_xi,
            schedule=schedules.init_schedule(),
            env_state=env_state,
            obs=obs,
            episodes=init_accumulator(cfg.n_envs, env.num_constraints),
            samples=jnp.zeros((3,), jnp.float32),
            rng=rng,
        )

    # ------------------------------------------------------------------ phases
    # 1-3 are the learner's: ``collect``, ``signal``, ``update`` (rcmdp_jax.learners)
    def adversary(self, key, state: TrainState, lam_tilde, hp, which):
        """4. The lane's robust method (``rcmdp_jax.adversary``) moves the kernels:
        ``(kernel, rollout envs' kernels, environment steps, the dual phase's kernel)``, the
        last the kernel itself unless the method reads ``C^`` elsewhere (``reads_cost``).
        Vmapped over a family's members, each method runs only on its own lanes
        (``batching.only_where``)."""
        args = (key, state.env_params, state.env_xi, state.params["actor"], lam_tilde, hp)
        four = lambda out: out if len(out) == 4 else (*out, out[0].xi)
        if len(self.adversaries) == 1:  # one method: known while tracing
            return four(self.adversaries[0].step(self.context, *args))

        def keep(key, params, env_xi, actor_params, lam_tilde, hp):
            return params, env_xi, jnp.float32(0.0), params.xi

        params, env_xi, samples, dual_xi = state.env_params, state.env_xi, jnp.float32(0.0), state.env_params.xi
        for i, method in enumerate(self.adversaries):
            if method.name == adversary.NONE:
                continue
            fn = lambda *a, method=method: four(method.step(self.context, *a))
            params, env_xi, n, d = self.on_lanes(fn, keep)(which == i, *args)
            dual_xi = jnp.where(which == i, d, dual_xi)
            args = (key, params, env_xi, *args[3:])
            samples = samples + n
        own = lanes_where(self.adversaries, which, lambda a: a.per_env)  # other lanes' envs run the adversary's kernel
        env_xi = jnp.where(own, env_xi, broadcast(params.xi, env_xi.shape[0]))
        return params, env_xi, samples, dual_xi

    def dual_kernels(self, env_params, env_xi, dual_xi, which):
        """Where the dual phase reads ``C^``: ``(kernel, rollout envs' kernels or None)`` —
        the method's kernel (and its envs' for per-env methods), or, on the lanes whose method
        reads the constraint's own worst candidate (``reads_cost``), that candidate."""
        per_env = env_xi if self.per_env else None
        if not any(a.reads_cost(self.cfg) for a in self.adversaries):  # static: today's reading everywhere
            return env_params, per_env
        reads = lanes_where(self.adversaries, which, lambda a: a.reads_cost(self.cfg))
        params = env_params.replace(xi=jnp.where(reads, dual_xi, env_params.xi))
        if per_env is not None:
            per_env = jnp.where(reads, broadcast(dual_xi, per_env.shape[0]), per_env)
        return params, per_env

    @staticmethod
    def on_lanes(fn, keep):
        """``(flag, *args) -> fn(*args)`` on the lanes whose flag is set and ``keep(*args)``
        on the others, which do none of ``fn``'s work (``batching.only_where``)."""
        return only_where(fn, keep)

    def fresh_kernels(self, key, state: TrainState, which) -> jax.Array | None:
        """The kernels rollout envs take when an episode ends, ``[n_steps, n_envs, ...]``:
        drawn uniformly from the box on the lanes whose method redraws (domain
        randomisation), the env's own kernel on the others; None without redrawing methods
        or for a learner that collects whole episodes (they draw between iterations)."""
        if not any(a.redraw for a in self.adversaries) or self.learner.episodic:
            return None
        cfg, xi = self.cfg, state.env_xi
        draws = uniform_kernels(key, state.env_params, cfg.n_steps * cfg.n_envs).reshape((cfg.n_steps,) + xi.shape)
        return jnp.where(
            lanes_where(self.adversaries, which, lambda a: a.redraw), draws, jnp.broadcast_to(xi, draws.shape)
        )

    def dual_phase(self, key, state: TrainState, env_params, hp, rule, policy_epochs, env_xi=None):
        """5. ``K`` ascent steps of the lane's constraint rule (code ``rule``) on ``lam``
        under the current kernel (no step, and no steps counted, for a rule without a
        dual phase): ``(dual state, dual steps, K)``. ``C^`` is read as
        ``cfg.dual_estimator`` says (``dual_batch.dual_estimates``; ``env_xi``: the rollout
        envs' kernels, for methods with per-env kernels). The samples are drawn for every
        rule: under a ``lax.cond`` whose predicate is batched (a family), XLA's simplifier
        loops on the PPO program."""
        cfg = self.cfg
        active = constraints.has_dual(rule)
        if cfg.dual_epochs_from_policy:  # PPO on CartPole: as many dual epochs as policy epochs ran
            n_epochs = jnp.minimum(policy_epochs, cfg.dual_epochs).astype(jnp.int32)
        else:
            n_epochs = jnp.int32(cfg.dual_epochs)
        n_ascent = jnp.where(active, n_epochs * cfg.dual_steps_per_epoch, 0)
        c_hat, estimates, n_dual = dual_estimates(key, self.env, env_params, self.actor, self.critic, state.params,
                                                  cfg, hp, env_xi)  # fmt: skip
        dual = constraints.switch(rule, lambda r, d: r.update(d, c_hat, hp, n_ascent, estimates), state.dual, cfg=cfg)
        return dual, jnp.where(active, n_dual, 0.0), n_ascent

    def evaluation(self, key, it, params, env_params, hp):
        """6. Deterministic evaluation for the training curves, every ``eval_every``
        iterations (NaN between)."""
        m = self.env.num_constraints

        def evaluate(_):
            v, c, _ = run_episodes(key, self.env, env_params, self.actor, params["actor"], self.cfg.eval_episodes,
                                   hp.gamma, True)  # fmt: skip
            return v.mean(), c.mean(0)

        def skip(_):
            return jnp.float32(jnp.nan), jnp.full((m,), jnp.nan, jnp.float32)

        return jax.lax.cond(it % self.cfg.eval_every == 0, evaluate, skip, None)

    # ------------------------------------------------------------------ iteration
    def iteration(self, state: TrainState, it, hp, variant: Variant) -> tuple[TrainState, dict]:
        rng, k_learn, k_robust, k_dual, k_eval = jax.random.split(state.rng, 5)
        k_roll, k_upd = self.learner.learn_keys(k_learn)
        lam_tilde = constraints.multiplier(variant.constraint, state.dual, hp, cfg=self.cfg)

        fresh = self.fresh_kernels(jax.random.fold_in(k_roll, 1), state, variant.adversary) if self.per_env else None
        data, state, metrics = self.learner.collect(k_roll, state, hp, self.per_env, fresh)
        signal = self.learner.signal(data, state.params, lam_tilde, hp)
        state, policy_steps, upd = self.learner.update(k_upd, state, data, signal, hp, variant.schedule)
        check_update_metrics(type(self.learner).__name__, upd)
        env_params, env_xi, robust_steps, dual_xi = self.adversary(k_robust, state, lam_tilde, hp, variant.adversary)
        dual_params, dual_env_xi = self.dual_kernels(env_params, env_xi, dual_xi, variant.adversary)
        dual, dual_steps, n_ascent = self.dual_phase(k_dual, state, dual_params, hp, variant.constraint,
                                                     upd["policy_epochs"], dual_env_xi)  # fmt: skip
        eval_v, eval_c = self.evaluation(k_eval, it, state.params, env_params, hp)

        moved = schedules.restart_trigger(state.env_params.xi, env_params.xi, env_params.kappa)
        sched = schedules.maybe_restart(state.schedule, moved)  # only the restart schedule reads it
        sched = schedules.advance(sched, 1 - variant.schedule.per_epoch())  # per-batch ticks
        samples = state.samples + jnp.stack([policy_steps, dual_steps, robust_steps]).astype(jnp.float32)
        metrics = (
            metrics
            | upd
            | dict(
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
        )
        new_state = state.replace(dual=dual, env_params=env_params, env_xi=env_xi, schedule=sched, samples=samples,
                                  rng=rng)  # fmt: skip
        return new_state, metrics

    def budgeted_iteration(self, state: TrainState, it, hp, variant: Variant) -> tuple[TrainState, dict]:
        """MCPMD's iteration slot: an iteration while policy steps remain in the budget,
        else nothing (``active = 0``; the state and the counters are carried over, the
        other metrics are NaN). It is a ``while_loop`` of at most one trip, so under
        ``vmap`` a slot costs nothing once every member has spent its budget."""
        shapes = jax.eval_shape(lambda s: self.iteration(s, it, hp, variant)[1], state)
        idle = jax.tree.map(lambda x: jnp.full(x.shape, jnp.nan, x.dtype), shapes)
        idle = idle | dict(
            lam=state.dual.lam, c_hat=state.dual.c_hat, xi=state.env_params.xi, active=jnp.float32(0.0),
            policy_steps=state.samples[0], dual_steps=state.samples[1], ltma_steps=state.samples[2],
        )  # fmt: skip

        def cond(carry):
            done, s, _ = carry
            return jnp.logical_and(jnp.logical_not(done), s.samples[0] < self.cfg.total_timesteps)

        def body(carry):
            _, s, _ = carry
            return (jnp.bool_(True), *self.iteration(s, it, hp, variant))

        _, state, metrics = jax.lax.while_loop(cond, body, (jnp.bool_(False), state, idle))
        return state, metrics

    def run(self, state: TrainState, hp, variant: Variant, start, n: int):
        """Iterations ``start .. start + n - 1`` (``n`` static): ``(state, metrics)``.
        ``metrics["valid_input"]`` is 0 where the hyperparameters or the kernel are out of
        range: values traced under ``vmap`` that no host check saw (a divergence)."""
        step = self.budgeted_iteration if self.learner.episodic else self.iteration
        ok = hparams_ok(hp) & self.env.kernel_ok(state.env_params)  # traced values: flagged per lane
        state, metrics = jax.lax.scan(lambda s, it: step(s, it, hp, variant), state, start + jnp.arange(n))
        return state, metrics | {"valid_input": jnp.full((n,), ok, jnp.float32)}
