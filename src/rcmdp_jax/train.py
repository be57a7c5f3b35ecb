"""``make_train``: one whole training run (docs/method.md §2a) as a pure, jit-able function.

The constraint mode, robustness and alpha schedule of an algorithm are arrays (a
``Variant``) selected inside the program by ``lax.switch`` / ``lax.cond``, so a family
(``rcmdp_jax.family``) is the same program vmapped over members, and one algorithm
(``make_train``) is a family of one.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax import adversary, envs, lagrange, schedules
from rcmdp_jax.adversary.base import Context, broadcast, has_density, lanes_where, uniform_kernels
from rcmdp_jax.adversary.corners import MAX_PARAMS
from rcmdp_jax.batching import only_where
from rcmdp_jax.config import Config
from rcmdp_jax.hparams import HParams, hparams_ok, validate_hparams
from rcmdp_jax.learners import make_learner
from rcmdp_jax.networks import Actor, Critic
from rcmdp_jax.rollout import EpisodeAccumulator, init_accumulator, run_episodes


@struct.dataclass
class TrainState:
    params: dict  # {"actor": ..., "critic": ...}
    opt_state: Any
    dual: lagrange.DualState
    env_params: Any  # the current kernel (xi): the adversary's state
    env_xi: jax.Array  # [n_envs, *xi.shape] each rollout env's kernel (the adversary's unless per-env)
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
    """What may differ between the algorithms of one family, as arrays: the constraint
    mode (a ``lagrange.MODE_CODES`` code), the robust method (an index into the family's
    ``methods``, ``rcmdp_jax.adversary``) and the alpha schedule (``schedules.Schedule`` codes)."""

    constraint: jax.Array
    adversary: jax.Array
    schedule: schedules.Schedule

    @classmethod
    def of(cls, cfg: Config, methods: tuple[str, ...] | None = None) -> Variant:
        methods = adversary.family_methods([cfg]) if methods is None else methods
        return cls(
            constraint=jnp.int32(lagrange.MODE_CODES[cfg.constraint]),
            adversary=jnp.int32(methods.index(adversary.method_of(cfg))),
            schedule=schedules.Schedule.of(cfg.alpha_schedule, cfg.alpha_tick),
        )


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


class Step:
    """The train step of one program shape (a config; its name, constraint mode,
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
        if "ltma" in self.methods:
            self.env.check_estimator(self.default_env_params, cfg.ltma_estimator)
        if "ltma-norm" in self.methods:
            self.env.check_estimator(self.default_env_params, "pathwise")
        if "corners" in self.methods and self.env.num_kernel_params > MAX_PARAMS:
            raise ValueError(f"adversary='corners' runs 2^n kernels an iteration: {self.env.name} has n="
                             f"{self.env.num_kernel_params} kernel parameters (at most {MAX_PARAMS}); choose "
                             f"worst-of-n or ltma-norm")  # fmt: skip
        self.actor, self.critic = build_networks(cfg, self.env)
        self.learner = make_learner(cfg, self.env, self.actor, self.critic)
        self.context = Context(self.env, self.actor, cfg, self.learner.budgeted, score_ok=has_density(self.env))

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
            dual=lagrange.init_dual(env.num_constraints, hp.lam_init),
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
        ``(kernel, rollout envs' kernels, environment steps)``. Vmapped over a family's
        members, each method runs only on its own lanes (``batching.only_where``)."""
        args = (key, state.env_params, state.env_xi, state.params["actor"], lam_tilde, hp)
        if len(self.adversaries) == 1:  # one method: known while tracing
            return self.adversaries[0].step(self.context, *args)

        def keep(key, params, env_xi, actor_params, lam_tilde, hp):
            return params, env_xi, jnp.float32(0.0)

        params, env_xi, samples = state.env_params, state.env_xi, jnp.float32(0.0)
        for i, method in enumerate(self.adversaries):
            if method.name == adversary.NONE:
                continue
            fn = functools.partial(method.step, self.context)
            params, env_xi, n = self.on_lanes(fn, keep)(which == i, *args)
            args = (key, params, env_xi, *args[3:])
            samples = samples + n
        own = lanes_where(self.adversaries, which, lambda a: a.per_env)  # other lanes' envs run the adversary's kernel
        env_xi = jnp.where(own, env_xi, broadcast(params.xi, env_xi.shape[0]))
        return params, env_xi, samples

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
        if not any(a.redraw for a in self.adversaries) or self.learner.budgeted:
            return None
        cfg, xi = self.cfg, state.env_xi
        draws = uniform_kernels(key, state.env_params, cfg.n_steps * cfg.n_envs).reshape((cfg.n_steps,) + xi.shape)
        return jnp.where(lanes_where(self.adversaries, which, lambda a: a.redraw), draws, jnp.broadcast_to(xi, draws.shape))

    def dual_phase(self, key, state: TrainState, env_params, hp, mode, policy_epochs, env_xi=None):
        """5. ``K`` ascent steps on ``lam`` under the current kernel (no step, and no steps
        counted, without constraints): ``(dual state, dual steps, K)``. ``env_xi``: the
        rollout envs' kernels, which the multiplier batch's envs take in turn (methods
        with per-env kernels). Each step reads
        ``C^`` as ``cfg.dual_estimator`` says (``lagrange.DUAL_ESTIMATORS``). The samples
        are drawn for every mode: under a ``lax.cond`` whose predicate is batched (a
        family), XLA's simplifier loops on the PPO program."""
        cfg = self.cfg
        active = mode != lagrange.MODE_CODES["none"]
        if cfg.dual_epochs_from_policy:  # PPO on CartPole: as many dual epochs as policy epochs ran
            n_epochs = jnp.minimum(policy_epochs, cfg.dual_epochs).astype(jnp.int32)
        else:
            n_epochs = jnp.int32(cfg.dual_epochs)
        n_ascent = jnp.where(active, n_epochs * cfg.dual_steps_per_epoch, 0)
        dropout = cfg.act_dropout or cfg.dual_dropout
        if cfg.dual_estimator == "start_value":
            _, c_eps, n_dual = run_episodes(key, self.env, env_params, self.actor, state.params["actor"],
                                            cfg.n_dual_episodes, hp.gamma, False, dropout)  # fmt: skip
            dual = lagrange.dual_step(mode, state.dual, c_eps.mean(0), hp, n_ascent)
            return dual, jnp.where(active, n_dual, 0.0), n_ascent
        k_batch, k_shuffle = jax.random.split(key)
        values = lagrange.multiplier_batch(k_batch, self.env, env_params, self.actor, self.critic, state.params,
                                           cfg, hp, dropout, env_xi)  # fmt: skip
        estimates = lagrange.minibatch_means(k_shuffle, values, cfg.dual_epochs, cfg.dual_minibatch)
        dual = lagrange.dual_step(mode, state.dual, values.mean(0), hp, n_ascent, estimates)
        return dual, jnp.where(active, jnp.float32(cfg.dual_batch), 0.0), n_ascent

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
        rng, k_learn, k_ltma, k_dual, k_eval = jax.random.split(state.rng, 5)
        k_roll, k_upd = self.learner.learn_keys(k_learn)
        lam_tilde = lagrange.effective_multiplier(variant.constraint, state.dual, hp.eta_lam)

        fresh = self.fresh_kernels(jax.random.fold_in(k_roll, 1), state, variant.adversary) if self.per_env else None
        data, state, metrics = self.learner.collect(k_roll, state, hp, self.per_env, fresh)
        signal = self.learner.signal(data, state.params, lam_tilde, hp)
        state, policy_steps, upd = self.learner.update(k_upd, state, data, signal, hp, variant.schedule)
        env_params, env_xi, ltma_steps = self.adversary(k_ltma, state, lam_tilde, hp, variant.adversary)
        dual, dual_steps, n_ascent = self.dual_phase(k_dual, state, env_params, hp, variant.constraint,
                                                     upd["policy_epochs"], env_xi if self.per_env else None)  # fmt: skip
        eval_v, eval_c = self.evaluation(k_eval, it, state.params, env_params, hp)

        moved = schedules.restart_trigger(state.env_params.xi, env_params.xi, env_params.kappa)
        sched = schedules.maybe_restart(state.schedule, moved)  # only the restart schedule reads it
        sched = schedules.advance(sched, 1 - variant.schedule.per_epoch())  # per-batch ticks
        samples = state.samples + jnp.stack([policy_steps, dual_steps, ltma_steps]).astype(jnp.float32)
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
        step = self.budgeted_iteration if self.learner.budgeted else self.iteration
        ok = hparams_ok(hp) & self.env.kernel_ok(state.env_params)  # traced values: flagged per lane
        state, metrics = jax.lax.scan(lambda s, it: step(s, it, hp, variant), state, start + jnp.arange(n))
        return state, metrics | {"valid_input": jnp.full((n,), ok, jnp.float32)}


@dataclasses.dataclass(frozen=True, eq=False)
class Trainer:
    """One algorithm's training run: ``trainer(rng, hparams=None, env_params=None)``.

    ``init`` and ``run`` split it for chunked runs (``run(init(rng), hparams, start, n)``
    over consecutive chunks gives the numbers of one call); ``config`` and ``env`` are
    the validated config and its environment. All three are pure and jit-able; vmap
    ``rng`` for seeds, ``hparams`` (array leaves) for a sweep, ``env_params`` for a
    batch of kernels."""

    config: Config
    env: Any
    step: Step

    def init(self, rng: jax.Array, hparams: HParams | None = None, env_params=None) -> TrainState:
        """The state before the first iteration (nominal kernel unless ``env_params``)."""
        env_params = self.step.default_env_params if env_params is None else env_params
        expected = type(self.step.default_env_params)
        if not isinstance(env_params, expected):
            raise TypeError(f"env_params must be the environment's {expected.__name__} (e.g. envs.make(name)[1] "
                            f"or its .replace(xi=...)), got {type(env_params).__name__}")  # fmt: skip
        self.env.validate_params(env_params)
        self.env.validate_kernel(env_params)
        return self.step.init(rng, resolve_hparams(self.config, hparams), env_params, Variant.of(self.config))

    def run(self, state: TrainState, hparams: HParams | None = None, start=0, n: int | None = None):
        """Iterations ``start .. start + n - 1`` (``n`` static, default all): ``(state, metrics)``."""
        n = self.config.num_iterations if n is None else n
        return self.step.run(state, resolve_hparams(self.config, hparams), Variant.of(self.config), start, n)

    def __call__(self, rng: jax.Array, hparams: HParams | None = None, env_params=None) -> TrainResult:
        state, metrics = self.run(self.init(rng, hparams, env_params), hparams)
        return TrainResult(state=state, metrics=metrics)


def make_train(config: Config) -> Trainer:
    """Validate ``config`` and return its ``Trainer``: ``train(rng, hparams=None,
    env_params=None) -> TrainResult``.

    ``train`` is pure: ``jax.jit(jax.vmap(train))(jax.random.split(key, n))`` trains
    ``n`` seeds in one compiled call; vmapping ``hparams`` sweeps hyperparameters
    and vmapping ``env_params`` trains on a batch of kernels.
    """
    if not isinstance(config, Config):
        raise TypeError(f"make_train needs an rcmdp_jax.Config (e.g. preset('cartpole', 'PPO')), got "
                        f"{type(config).__name__}")  # fmt: skip
    cfg = config.validate()
    step = Step(cfg)
    return Trainer(config=cfg, env=step.env, step=step)
