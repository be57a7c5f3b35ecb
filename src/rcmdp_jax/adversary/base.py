"""The ``Adversary`` protocol and what several methods share: kernels drawn uniformly
from the box, and the Lagrangian cost of the policy on a batch of kernels."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from rcmdp_jax import box
from rcmdp_jax.constraints import lagrangian_cost
from rcmdp_jax.plugin import Plugin, check_count
from rcmdp_jax.rollout import Policy, episode_values


@dataclasses.dataclass(frozen=True)
class Context:
    """What a method reads, fixed while tracing: the environment, the actor module, the
    config, whether the learner collects one whole episode an iteration (MCPMD) and
    whether the kernel has a density."""

    env: Any
    actor: Any
    cfg: Any
    episodic: bool
    score_ok: bool = True  # the kernel has a density (the score-function gradient exists)

    def at(self, hp) -> Context:
        """This context with its actor at ``hp``'s dropout (a number of the program)."""
        from rcmdp_jax.networks import build_networks

        return dataclasses.replace(self, actor=build_networks(self.cfg, self.env, hp)[0])


class Adversary(Plugin):
    """A robust training method. ``step`` moves the kernels after the policy update:
    ``(params, env_xi) -> (params, env_xi, environment steps spent)``, where ``params`` is
    the one kernel of the adversary (the dual phase, evaluation and the ``xi`` metric use
    it) and ``env_xi`` ``[n_envs, *xi.shape]`` the kernel of each rollout environment.
    ``per_env``: the method gives the rollout envs kernels of their own (else every env
    runs ``params.xi``; a learner must honour them, ``Learner.per_env_kernels``);
    ``redraw``: an env's kernel is drawn anew when its episode ends. Its options, checks
    and memory needs: ``rcmdp_jax.plugin.Plugin`` (read ``ctx.cfg.option(name)``).

    Its options, every method's: those several methods share, declared once here."""

    name = "none"
    per_env = False
    redraw = False
    options = {
        "ltma_horizon": 10,  # ltma, ltma-norm: the steps of the short episodes their gradient is taken on
        "adversary_episodes": 8,  # ltma-norm: episodes per step; worst-of-n, corners: per kernel (candidate_values)
    }

    @classmethod
    def check_options(cls, cfg) -> None:
        for name in Adversary.options:
            check_count(name, cfg.option(name))

    def init_env_xi(self, key, params, n_envs: int) -> jax.Array:
        return broadcast(params.xi, n_envs)

    @classmethod
    def own_env_kernels(cls, cfg) -> bool:
        """Whether, under ``cfg``, the method gives the rollout envs kernels of their own
        (``per_env``; a method whose options decide it says so here)."""
        return cls.per_env

    @classmethod
    def separate(cls, cfg) -> bool:
        """Whether its rollout envs serve the reward and each constraint apart, each on its own
        worst kernel, the learner weighting each env's advantages to its objective
        (``candidates.objective_weights``)."""
        return False

    @classmethod
    def reads_cost(cls, cfg) -> bool:
        """Whether ``step`` returns a fourth value: the kernel where the dual phase reads ``C^``
        (``adversary.candidates``); else it reads at ``params`` (and ``env_xi`` if ``per_env``)."""
        return False

    def step(self, ctx: Context, key, params, env_xi, actor_params, lam_tilde, hp):
        return params, broadcast(params.xi, env_xi.shape[0]), jnp.float32(0.0)

    def init_state(self, ctx: Context, params, hp):
        """The method's own state before the first iteration (a pytree of arrays; ``params`` the
        first kernel), kept in ``TrainState.method_state[name]``, carried, checkpointed and resumed
        with the train state; an empty one (the default ``{}``): the method keeps none."""
        return {}

    def step_state(self, ctx: Context, own, key, params, env_xi, actor_params, lam_tilde, hp):
        """``step`` of a method with a state of its own: ``(step's outputs, new own state)``;
        the default runs ``step`` and keeps ``own`` as it is."""
        return self.step(ctx, key, params, env_xi, actor_params, lam_tilde, hp), own


class Nominal(Adversary):
    """No adversary: the nominal kernel throughout (a non-robust algorithm)."""


def require_env_per_objective(env, cfg, what: str, otherwise: str = "") -> None:
    """Refuse ``cfg`` when ``what`` (a method, or its option's value) would give the reward and each of
    ``env``'s constraints a rollout env of its own and ``cfg.n_envs`` is too few (``otherwise``: the way out)."""
    if cfg.n_envs < 1 + env.num_constraints:
        raise ValueError(f"{what} gives the reward and each of the {env.num_constraints} constraint(s) rollout envs "
                         f"of their own: n_envs={cfg.n_envs} must be at least {1 + env.num_constraints}"
                         + (f"; or choose {otherwise}" if otherwise else ""))  # fmt: skip


def broadcast(xi: jax.Array, n: int) -> jax.Array:
    return jnp.broadcast_to(xi, (n,) + jnp.shape(xi))


def uniform_kernels(key, params, n: int) -> jax.Array:
    """``n`` kernels drawn uniformly from the box ``|xi - xi_c| <= kappa``: ``[n, *xi.shape]``."""
    return box.uniform(key, params.xi_c, params.kappa, n)


def candidate_values(ctx: Context, key, params, xis: jax.Array, actor_params, lam_tilde, hp):
    """The policy on each kernel of ``xis`` (``[K, ...]``), each the mean of option ``adversary_episodes``
    whole episodes with the same keys on every kernel (common random numbers): ``(Lagrangian
    costs lam~ . C - V [K] (higher is worse for the learner), constraint values C [K, m], steps)``."""
    policy = Policy(ctx.actor, actor_params, dropout=ctx.cfg.act_dropout)
    keys = jax.random.split(key, ctx.cfg.option("adversary_episodes"))

    def on(xi):
        one = lambda k: episode_values(k, ctx.env, params.replace(xi=xi), policy, hp.gamma, ctx.env.episode_length)
        v, c, n, _ = jax.vmap(one)(keys)
        return jnp.mean(lagrangian_cost(v, c, lam_tilde)), c.mean(0), n.sum()

    costs, values, steps = jax.vmap(on)(xis)
    return costs, values, steps.sum()


def lagrangian_costs(ctx: Context, key, params, xis: jax.Array, actor_params, lam_tilde, hp):
    """``(the Lagrangian costs [K], steps)`` of ``candidate_values``."""
    costs, _, steps = candidate_values(ctx, key, params, xis, actor_params, lam_tilde, hp)
    return costs, steps


def lanes_where(adversaries, which, test) -> jax.Array:
    """Whether the lane's method (``which``, an index into ``adversaries``) passes ``test``."""
    flags = [which == i for i, a in enumerate(adversaries) if test(a)]
    return functools.reduce(jnp.logical_or, flags, jnp.bool_(False))
