"""The robust methods of one program, each on its own lanes (``Lanes``): the rollout envs'
first kernels, the fresh kernels they take when an episode ends, the methods' step after
the policy update (the train step's phase 4) and where the dual phase reads ``C^``.

A program holds one method (one algorithm) or several (a family: ``family_methods``);
``which`` is the lane's method, an index into ``names`` (``step.Variant.adversary``).
With several, each method runs only on its own lanes (``batching.only_where``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rcmdp_jax.adversary import NONE, get
from rcmdp_jax.adversary.base import Context, broadcast, lanes_where, uniform_kernels
from rcmdp_jax.adversary.candidates import objective_weights
from rcmdp_jax.batching import only_where


class Lanes:
    """The robust methods ``names`` of a program, on ``context`` (its environment, actor,
    config and learner). ``per_env``: some method gives the rollout envs kernels of their
    own (they live in ``TrainState.env_xi``)."""

    def __init__(self, names: tuple[str, ...], context: Context):
        self.names = tuple(names)
        self.methods = tuple(get(m) for m in self.names)
        self.context = context
        self.per_env = any(a.own_env_kernels(context.cfg) for a in self.methods)

    def where(self, which, test) -> jax.Array:
        """Whether the lane's method passes ``test`` (a function of the method)."""
        return lanes_where(self.methods, which, test)

    def first_kernels(self, key, env_params, env_xi, which) -> jax.Array:
        """The rollout envs' first kernels ``[n_envs, ...]``: ``env_xi`` (the nominal kernel's),
        or on the lanes of a per-env method its own (e.g. domain randomisation's draws)."""
        for i, a in enumerate(self.methods):
            if a.own_env_kernels(self.context.cfg):
                env_xi = jnp.where(which == i, a.init_env_xi(key, env_params, env_xi.shape[0]), env_xi)
        return env_xi

    def fresh_kernels(self, key, env_params, env_xi, which) -> jax.Array | None:
        """The kernels rollout envs take when an episode ends, ``[n_steps, n_envs, ...]``:
        drawn uniformly from the box on the lanes whose method redraws (domain
        randomisation), the env's own kernel (``env_xi``) on the others; None without
        redrawing methods or for a learner that collects whole episodes (they draw
        between iterations)."""
        if not any(a.redraw for a in self.methods) or self.context.episodic:
            return None
        cfg = self.context.cfg
        draws = uniform_kernels(key, env_params, cfg.n_steps * cfg.n_envs).reshape((cfg.n_steps,) + env_xi.shape)
        return jnp.where(self.where(which, lambda a: a.redraw), draws, jnp.broadcast_to(env_xi, draws.shape))

    def init_state(self, env_params, hp) -> dict:
        """The program's stateful methods' own states (``Adversary.init_state``), by name: one
        structure on every lane of a family, each method's only where the program holds it."""
        own = {a.name: a.init_state(self.context, env_params, hp) for a in self.methods if a.name != NONE}
        return {n: s for n, s in own.items() if jax.tree.leaves(s)}

    def step(self, key, env_params, env_xi, actor_params, lam_tilde, hp, which, method_state=None):
        """4. The lane's method moves the kernels after the policy update: ``(kernel, rollout
        envs' kernels, environment steps, the dual phase's kernel, the methods' own states)``,
        the fourth the kernel itself unless the method reads ``C^`` elsewhere
        (``Adversary.reads_cost``); a stateful method's state (``method_state[name]``) moves
        on its own lanes only (``Adversary.step_state``), the others' branches leave it."""
        method_state = {} if method_state is None else method_state
        args = (key, env_params, env_xi, actor_params, lam_tilde, hp)

        def four(method, own, *a):  # the actor at the dropout of the hp passed (a[-1]), not closed over
            out, mine = method.step_state(self.context.at(a[-1]), own.get(method.name, {}), *a)
            own = {**own, method.name: mine} if method.name in own else own
            return (*(out if len(out) == 4 else (*out, out[0].xi)), own)

        if len(self.methods) == 1:  # one method: known while tracing
            return four(self.methods[0], method_state, *args)

        def keep(own, key, params, env_xi, actor_params, lam_tilde, hp):
            return params, env_xi, jnp.float32(0.0), params.xi, own

        params, samples, dual_xi = env_params, jnp.float32(0.0), env_params.xi
        for i, method in enumerate(self.methods):
            if method.name == NONE:
                continue
            fn = lambda own, *a, method=method: four(method, own, *a)
            params, env_xi, n, d, method_state = self.on_lanes(fn, keep)(which == i, method_state, *args)
            dual_xi = jnp.where(which == i, d, dual_xi)
            args = (key, params, env_xi, *args[3:])
            samples = samples + n
        own = self.where(which, lambda a: a.own_env_kernels(self.context.cfg))  # other lanes' envs run the adversary's kernel
        env_xi = jnp.where(own, env_xi, broadcast(params.xi, env_xi.shape[0]))
        return params, env_xi, samples, dual_xi, method_state

    @staticmethod
    def on_lanes(fn, keep):
        """``(flag, *args) -> fn(*args)`` on the lanes whose flag is set and ``keep(*args)``
        on the others, which do none of ``fn``'s work (``batching.only_where``)."""
        return only_where(fn, keep)

    def objective_weights(self, which, lam_tilde, m: int):
        """Each rollout env's weights on the reward's and each cost's advantage ``[n_envs, 1 + m]``
        (``Learner.signal``): on the lanes whose method trains against the separate worst cases
        (``candidates``, "separate") while ``lam~ != 0``, each env its own objective's; 1
        elsewhere. None (static) when no method of the program does."""
        cfg = self.context.cfg
        if not any(a.separate(cfg) for a in self.methods):
            return None
        on = self.where(which, lambda a: a.separate(cfg)) & jnp.any(lam_tilde != 0)
        return jnp.where(on, objective_weights(cfg.n_envs, m), 1.0)

    def dual_kernels(self, env_params, env_xi, dual_xi, which):
        """Where the dual phase reads ``C^``: ``(kernel, rollout envs' kernels or None)`` —
        the method's kernel (and its envs' for per-env methods), or, on the lanes whose method
        reads the constraint's own worst candidate (``reads_cost``), that candidate."""
        cfg = self.context.cfg
        per_env = env_xi if self.per_env else None
        if not any(a.reads_cost(cfg) for a in self.methods):  # static: the method's kernel everywhere
            return env_params, per_env
        reads = self.where(which, lambda a: a.reads_cost(cfg))
        params = env_params.replace(xi=jnp.where(reads, dual_xi, env_params.xi))
        if per_env is not None:
            per_env = jnp.where(reads, broadcast(dual_xi, per_env.shape[0]), per_env)
        return params, per_env
