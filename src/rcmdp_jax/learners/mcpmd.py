"""MCPMD / RMCPMD, the reference REINFORCE code (docs/method.md §2b): one whole episode of one
environment per iteration, acting with dropout, returns-to-go of the Lagrangian reward,
one optimizer step. The critic is not trained."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax
from jax.extend.core import jaxpr_as_fun

from rcmdp_jax import losses
from rcmdp_jax.advantages import discounted_returns
from rcmdp_jax.constraints import lagrangian_reward
from rcmdp_jax.learners.base import Learner
from rcmdp_jax.rollout import collect_episode, episode_cost, reward_and_costs, stored_values, value_discounts


class MCPMD(Learner):
    episodic = True
    trains_critic = False
    per_env_kernels = True  # its one env runs ``state.env_xi[0]``

    @classmethod
    def preset(cls, fields, settings, domain):
        """The reference REINFORCE code: one whole episode of one env per iteration, acting in
        training mode, PyTorch's default init and Adam (on every domain: docs/method.md §2b), no
        clipping; one dual step on one episode."""
        ep = domain.episode_length
        return {**fields, "optimizer": "adam", "n_envs": 1, "n_steps": ep, "minibatch_size": ep, "epochs": 1,
                "init": "torch", "adam_eps": 1e-8, "max_grad_norm": math.inf, "act_dropout": True,
                "n_dual_episodes": 1, "dual_epochs": 1, "dual_batch": ep, "dual_minibatch": ep, "eval_every": 10}  # fmt: skip

    def learn_keys(self, key):
        """``(rollout key, update key)``: the update replays the episode's own dropout keys."""
        return key, key

    def iteration_slot(self, iteration, state, idle, budget=None):
        """MCPMD's iteration slot (its step budget ``budget``, ``cfg.total_timesteps`` when None;
        traced in a program that serves every budget, ``step.Variant.budget``): an iteration
        while policy steps remain in the budget, else nothing (``idle(state)``'s metrics,
        ``active = 0``; the state and the counters are carried over, the other metrics are
        NaN). It is a ``while_loop`` of at most one trip, so under ``vmap`` a slot costs
        nothing once every member has spent its budget. The iteration is traced once: the
        loop's body replays its trace (a jaxpr), whose output shapes give ``nothing``'s."""
        traced, out = jax.make_jaxpr(iteration, return_shape=True)(state)
        out_tree, shapes = jax.tree.structure(out), out[1]
        replay = lambda s: jax.tree.unflatten(out_tree, jaxpr_as_fun(traced)(*jax.tree.leaves(s)))  # noqa: E731
        nothing = jax.tree.map(lambda x: jnp.full(x.shape, jnp.nan, x.dtype), shapes) | idle(state)

        budget = self.cfg.total_timesteps if budget is None else budget

        def cond(carry):
            done, s, _ = carry
            return jnp.logical_and(jnp.logical_not(done), s.samples[0] < budget)

        def body(carry):
            _, s, _ = carry
            return (jnp.bool_(True), *replay(s))

        _, state, metrics = jax.lax.while_loop(cond, body, (jnp.bool_(False), state, nothing))
        return state, metrics

    def collect(self, key, state, hp, per_env: bool = False, fresh_xi=None):
        """1. One whole episode of one env under the current kernel (``per_env``: the env's
        own, ``state.env_xi[0]``; a method that redraws does so between iterations),
        acting with dropout."""
        env = self.env
        params = state.env_params.replace(xi=state.env_xi[0]) if per_env else state.env_params
        ep = collect_episode(key, env, params, self.actor, state.params["actor"], env.episode_length,
                             self.cfg.act_dropout)  # fmt: skip
        disc_return, disc_costs = stored_values(ep, value_discounts(env, hp.gamma))
        stats = dict(
            episode_return=jnp.sum(ep.reward * ep.alive),
            episode_disc_return=disc_return,
            episode_costs=disc_costs,
            episode_ep_cost=jnp.sum(episode_cost(env, ep.costs, params) * ep.alive[:, None], axis=0),
            episodes_completed=jnp.float32(1.0),
        )
        return ep, state, stats

    def signal(self, data, params, lam_tilde, hp, weights=None):
        """2. The episode's returns-to-go of the Lagrangian reward ``[T]`` (where a constraint has
        a discount of its own, ``gamma_c``: the reward's and each cost's, combined)."""
        if getattr(self.env, "cost_gammas", None) is not None:
            streams = reward_and_costs(data) * data.alive[:, None]
            to_go = discounted_returns(streams, jnp.zeros_like(data.alive), value_discounts(self.env, hp.gamma))
            return lagrangian_reward(to_go[:, 0], to_go[:, 1:], lam_tilde)
        lagr_reward = lagrangian_reward(data.reward, data.costs, lam_tilde) * data.alive
        return discounted_returns(lagr_reward, jnp.zeros_like(data.alive), hp.gamma)

    def update(self, key, state, data, signal, hp, schedule):
        """3. One REINFORCE step. Returns ``(state, policy steps, metrics)``."""
        params, opt_state, upd = self.reinforce(state.params, state.opt_state, data, signal, hp)
        upd = upd | {"alpha": jnp.asarray(hp.alpha, jnp.float32)}  # no KL penalty: reported as set
        return state.replace(params=params, opt_state=opt_state), data.alive.sum(), upd

    def reinforce(self, params, opt_state, episode, returns: jax.Array, hp):
        """MCPMD's step (docs/method.md §2b): one optimizer step of ``reinforce_loss`` on one whole
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
        updates, opt_state = self.optimizer(hp).update(grads, opt_state, params)
        deterministic_lp = lambda p: jax.vmap(lambda o, a: actor.apply(p, o).log_prob(a))(episode.obs, episode.action)
        old_lp = deterministic_lp(params["actor"])
        params = optax.apply_updates(params, updates)
        n = jnp.maximum(episode.alive.sum(), 1.0)
        kl = jnp.sum(episode.alive * losses.reference_kl(deterministic_lp(params["actor"]) - old_lp)) / n
        metrics = dict(policy_loss=pl, critic_loss=jnp.float32(0.0), n_updates=jnp.float32(1.0),
                       policy_epochs=jnp.float32(1.0), approx_kl=kl)  # fmt: skip
        return params, opt_state, metrics
