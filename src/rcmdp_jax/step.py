"""``Step``: one training iteration (docs/method.md §2a) of one program shape, and the train
state it carries. ``Step.iteration`` reads top to bottom, one call a phase:

1-3. the learner's ``collect``, ``signal`` and ``update`` (``rcmdp_jax.learners``);
4.   the lane's robust method moves the kernels (``rcmdp_jax.adversary.lanes``);
5.   the dual phase steps the multipliers (``rcmdp_jax.dual``);
6.   the training curve's evaluation (``rcmdp_jax.evaluate.curve_point``);
then the alpha schedule's state (``rcmdp_jax.schedules``) and the iteration's metrics.

The constraint rule, robust method and alpha schedule of an algorithm are arrays (a
``Variant``) selected inside the program by ``lax.switch`` / ``lax.cond``, so a family
(``rcmdp_jax.family``) is the same program vmapped over members, and one algorithm
(``train.make_train``) is a family of one.
"""

from __future__ import annotations

import copy
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from rcmdp_jax import adversary, constraints, envs, options, schedules
from rcmdp_jax.adversary.base import Context, broadcast
from rcmdp_jax.adversary.lanes import Lanes
from rcmdp_jax.config import Config
from rcmdp_jax.dual import dual_phase
from rcmdp_jax.evaluate import curve_point
from rcmdp_jax.hparams import HParams, hparams_ok
from rcmdp_jax.kernel_gradients import has_density
from rcmdp_jax.learners import UPDATE_METRICS, make_learner
from rcmdp_jax.networks import build_networks
from rcmdp_jax.rollout import EpisodeAccumulator, init_accumulator


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
    samples: jax.Array  # cumulative (policy, dual, robust method) environment steps
    rng: jax.Array
    learner_state: Any = struct.field(default_factory=dict)  # the learner's own state (``Learner.init_state``)
    method_state: dict = struct.field(default_factory=dict)  # stateful robust methods' own, by name


@struct.dataclass
class Variant:
    """What may differ between the algorithms of one family, as arrays: the constraint rule
    (``constraints.Choice``: its index among the family's rules), the robust method (an index into the family's ``methods``,
    ``rcmdp_jax.adversary``), the alpha schedule (``schedules.Schedule`` codes, and the run's
    iterations its ``K`` counts from) and the policy step budget (``Config.total_timesteps``,
    float32: what an episodic learner's slots spend). Arguments of a program, not constants
    of it: one program serves every budget."""

    constraint: constraints.Choice
    adversary: jax.Array
    schedule: schedules.Schedule
    budget: jax.Array

    @classmethod
    def of(cls, cfg: Config, methods: tuple[str, ...] | None = None, rules: tuple[str, ...] | None = None) -> Variant:
        methods = adversary.family_methods([cfg]) if methods is None else methods
        return cls(
            constraint=constraints.Choice.of(cfg.constraint, rules or (cfg.constraint,)),
            adversary=jnp.int32(methods.index(adversary.method_of(cfg))),
            schedule=schedules.Schedule.of(cfg.alpha_schedule, cfg.alpha_tick, cfg.num_iterations),
            budget=jnp.float32(cfg.total_timesteps),
        )


def check_update_metrics(learner: str, metrics: dict) -> None:
    """Refuse (while tracing) a learner's ``update`` metrics without ``UPDATE_METRICS``."""
    missing = [k for k in UPDATE_METRICS if k not in metrics]
    if missing:
        raise ValueError(f"learner {learner}: update must return the metrics {', '.join(UPDATE_METRICS)}; "
                         f"missing {', '.join(missing)} (rcmdp_jax.learners.base.Learner.update)")  # fmt: skip


def counters(samples) -> dict:
    """The cumulative environment steps as metrics. ``ltma_steps`` counts every robust
    method's steps, not LTMA's alone: the name is kept because run folders' checkpoints hold
    the metrics' tree (a key more or less and an older checkpoint no longer restores)."""
    return dict(policy_steps=samples[0], dual_steps=samples[1], ltma_steps=samples[2])


def idle_metrics(state: TrainState) -> dict:
    """The metrics an iteration slot that does nothing carries over (``Learner.iteration_slot``)."""
    dual = state.dual
    held = dict(lam=dual.lam, c_hat=dual.c_hat - dual.margin, margin=dual.margin, xi=state.env_params.xi,
                active=jnp.float32(0.0))  # fmt: skip
    return held | counters(state.samples)


class Step:
    """The train step of one program shape (a config; its name, constraint rule,
    robust method, schedule and hyperparameters are not read here: they come as
    ``hp`` and ``variant``). ``methods``: the robust methods the program holds
    (``adversary.family_methods``; one algorithm's program holds its own only), chosen
    per lane by ``variant.adversary`` (``adversary.lanes.Lanes``); ``rules``: the constraint
    rules' names the program trains (those that keep a state of their own get it in
    ``DualState.own``; default: ``cfg``'s)."""

    lanes_class = Lanes  # how the methods share a program's lanes

    def __init__(self, cfg: Config, methods: tuple[str, ...] | None = None, rules: tuple[str, ...] | None = None):
        self.cfg = cfg
        self.methods = adversary.family_methods([cfg]) if methods is None else tuple(methods)
        self.rules = tuple(constraints.get(n, cfg) for n in (rules or (cfg.constraint,)))
        self.env, self.default_env_params = envs.make(cfg.env)
        options.check_env(cfg, self.env, self.methods)  # each plug-in's own checks of the env
        self.actor, self.critic = build_networks(cfg, self.env)
        self.learner = make_learner(cfg, self.env, self.actor, self.critic)
        context = Context(self.env, self.actor, cfg, self.learner.episodic, score_ok=has_density(self.env))
        self.lanes = self.lanes_class(self.methods, context)  # its methods' actor: at the hp they get (Context.at)
        self.per_env = self.lanes.per_env  # rollout envs with kernels of their own

    def at(self, hp) -> Step:
        """This step with its networks at ``hp``'s dropout (a number of the program, may be traced)."""
        step = copy.copy(self)
        step.actor, step.critic = build_networks(self.cfg, self.env, hp)
        step.learner = make_learner(self.cfg, self.env, step.actor, step.critic)
        return step

    def init(self, rng, hp: HParams, env_params, variant: Variant | None = None) -> TrainState:
        cfg, env = self.cfg, self.env
        rng, k_a, k_c, k_env = jax.random.split(rng, 4)
        env_xi = broadcast(env_params.xi, cfg.n_envs)
        if self.per_env and variant is not None:  # e.g. domain randomisation's first kernels
            env_xi = self.lanes.first_kernels(jax.random.fold_in(k_env, 1), env_params, env_xi, variant.adversary)
        obs0 = jnp.zeros((env.obs_dim,), jnp.float32)
        params = {"actor": self.actor.init(k_a, obs0), "critic": self.critic.init(k_c, obs0)}
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, cfg.n_envs), env_params)
        return TrainState(
            params=params,
            opt_state=self.learner.optimizer(hp).init(params),
            dual=constraints.init_dual(env.num_constraints, hp.lam_init, self.rules, hp),
            env_params=env_params,
            env_xi=env_xi,
            schedule=schedules.init_schedule(),
            env_state=env_state,
            obs=obs,
            episodes=init_accumulator(cfg.n_envs, env.num_constraints),
            samples=jnp.zeros((3,), jnp.float32),
            rng=rng,
            learner_state=self.learner.init_state(params, hp),
            method_state=self.lanes.init_state(env_params, hp),
        )

    def iteration(self, state: TrainState, it, hp, variant: Variant) -> tuple[TrainState, dict]:
        """One iteration: ``(state, metrics)``."""
        rng, k_learn, k_robust, k_dual, k_eval = jax.random.split(state.rng, 5)
        k_roll, k_upd = self.learner.learn_keys(k_learn)
        lam_tilde = constraints.multiplier(variant.constraint, state.dual, hp, cfg=self.cfg)
        which = variant.adversary

        # 1-3. the learner: experience under the current kernels, its Lagrangian signal, the update
        fresh = None
        if self.per_env:
            fresh = self.lanes.fresh_kernels(jax.random.fold_in(k_roll, 1), state.env_params, state.env_xi, which)
        data, state, metrics = self.learner.collect(k_roll, state, hp, self.per_env, fresh)
        weights = self.lanes.objective_weights(which, lam_tilde, self.env.num_constraints)
        signal = self.learner.signal(data, state.params, lam_tilde, hp, *(() if weights is None else (weights,)))
        state, policy_steps, upd = self.learner.update(k_upd, state, data, signal, hp, variant.schedule)
        check_update_metrics(type(self.learner).__name__, upd)
        # 4. the robust method moves the kernels
        env_params, env_xi, robust_steps, dual_xi, method_state = self.lanes.step(
            k_robust, state.env_params, state.env_xi, state.params["actor"], lam_tilde, hp, which, state.method_state
        )
        # 5. the dual phase, reading C^ where the method says
        dual_params, dual_env_xi = self.lanes.dual_kernels(env_params, env_xi, dual_xi, which)
        dual, dual_steps, n_ascent = dual_phase(k_dual, self.env, self.actor, self.critic, state.params, state.dual,
                                                dual_params, self.cfg, hp, variant.constraint, upd["policy_epochs"],
                                                dual_env_xi)  # fmt: skip
        # 6. the training curve
        eval_v, eval_c, eval_ep = curve_point(k_eval, it, self.env, self.actor, state.params["actor"], env_params,
                                              self.cfg, hp)  # fmt: skip

        sched = schedules.after_iteration(state.schedule, state.env_params.xi, env_params, variant.schedule)
        samples = state.samples + jnp.stack([policy_steps, dual_steps, robust_steps]).astype(jnp.float32)
        metrics = metrics | upd | counters(samples)
        metrics |= dict(lam=dual.lam, lam_tilde=lam_tilde, c_hat=dual.c_hat - dual.margin, margin=dual.margin, dual_updates=n_ascent.astype(jnp.float32),
                        xi=env_params.xi, eval_return=eval_v, eval_costs=eval_c, eval_ep_cost=eval_ep,
                        active=jnp.float32(1.0))  # fmt: skip
        new_state = state.replace(dual=dual, env_params=env_params, env_xi=env_xi, schedule=sched, samples=samples,
                                  rng=rng, method_state=method_state)  # fmt: skip
        return new_state, metrics

    def run(self, state: TrainState, hp, variant: Variant, start, n: int, total=None):
        """Iterations ``start .. start + n - 1`` (``n`` static): ``(state, metrics)``, each
        a slot of the learner's (``Learner.iteration_slot``: MCPMD's step budget).
        ``total`` (an int32 scalar, may be traced; None: every slot runs): the run's
        iterations; slots from ``total`` on do nothing (``idle_metrics``, the other metrics
        NaN), so that a program of a fixed chunk ``n`` serves every budget.
        ``metrics["valid_input"]`` is 0 where the hyperparameters or the kernel are out of
        range: values traced under ``vmap`` that no host check saw (a divergence)."""

        step = self.at(hp)

        def slot(s, it):
            return step.learner.iteration_slot(lambda s: step.iteration(s, it, hp, variant), s, idle_metrics,
                                               variant.budget)  # fmt: skip

        ok = hparams_ok(hp) & self.env.kernel_ok(state.env_params)  # traced values: flagged per lane
        state, metrics = jax.lax.scan(slot if total is None else until(slot, total), state, start + jnp.arange(n))
        return state, metrics | {"valid_input": jnp.full((n,), ok, jnp.float32)}


def until(slot, total):
    """``slot(state, it)`` while ``it < total``, else nothing: the state carried over, the metrics
    ``idle_metrics``' (the others NaN). ``total`` is one number for every lane of a vmapped
    program, so the slots past it are a real branch, not computed and discarded."""

    def bounded(s, it):
        traced = []  # the slot's metrics as ``cond`` traced its first branch: the slot is traced once

        def run(s):
            traced.append(out := slot(s, it))
            return out

        def nothing(s):
            shapes = traced[-1][1] if traced else jax.eval_shape(lambda s: slot(s, it)[1], s)
            return s, jax.tree.map(lambda x: jnp.full(x.shape, jnp.nan, x.dtype), shapes) | idle_metrics(s)

        return jax.lax.cond(it < total, run, nothing, s)

    return bounded
