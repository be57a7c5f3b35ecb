"""The ``Learner`` protocol (docs/method.md §2b) and the optimizer every learner builds.

A learner owns the first three phases of an iteration (``step.Step.iteration``):
``collect`` (the iteration's experience under the current kernels), ``signal`` (the
Lagrangian learning signal) and ``update`` (the policy and critic step), and builds its
optimizer. One file per learner, registered by name in ``rcmdp_jax.learners``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax
import optax

from rcmdp_jax.plugin import Plugin

# what every learner's ``update`` returns as its metrics (the train step checks it while tracing)
UPDATE_METRICS = ("policy_loss", "critic_loss", "n_updates", "policy_epochs", "approx_kl", "alpha")


def make_optimizer(cfg, hp) -> optax.GradientTransformation:
    """Adam (eps ``hp.adam_eps``) or SGD at learning rate ``hp.lr``, after a global gradient-norm
    clip at ``hp.max_grad_norm``: numbers of ``hp`` (``HParams``), which may be traced, so a changed
    eps or clip is an argument of the program, not a new one. A config whose clip is infinite
    (``cfg.hparams``) builds an optimiser without it (MCPMD's)."""
    if cfg.optimizer == "adam":
        base = optax.inject_hyperparams(optax.adam)(learning_rate=hp.lr, eps=hp.adam_eps)
    else:
        base = optax.inject_hyperparams(optax.sgd)(learning_rate=hp.lr)
    if cfg.hparams.max_grad_norm == math.inf:  # built without the clip (``hparams.BUILT_FOR``)
        return base
    return optax.chain(optax.clip_by_global_norm(hp.max_grad_norm), base)  # a lane at inf: no clip either


BATCH_ENVS = 4  # the rollout envs of a preset's batch (PPO, MDPO), on every domain (docs/method.md §3)


@dataclasses.dataclass(frozen=True)
class Learner(Plugin):
    """One learner of one configuration: ``actor``, ``critic`` (flax modules), ``cfg`` (the
    static choices: an ``rcmdp_jax.Config``) and ``env``. Registered as a class (made
    without arguments when registered, so every field has a default).

    ``episodic``: an iteration is one whole episode of one env, so the train scan has idle
    iteration slots past the step budget (``Config.num_iterations``); ``trains_critic``:
    the critic's cost heads are trained (the ``gae`` dual estimator reads them);
    ``per_env_kernels``: ``collect`` honours per-env kernels (``state.env_xi`` and
    ``fresh_xi``): a learner that does not is refused with a robust method that gives each
    rollout env its own kernel (``dr``, ``worst-of-n``). Its options, checks and memory
    needs: ``rcmdp_jax.plugin.Plugin`` (read ``self.cfg.option(name)``)."""

    actor: Any = None
    critic: Any = None
    cfg: Any = None
    env: Any = None
    episodic: ClassVar[bool] = False
    trains_critic: ClassVar[bool] = True
    per_env_kernels: ClassVar[bool] = False

    @classmethod
    def preset(cls, fields, settings, domain):
        """Stable-Baselines3's conventions (docs/method.md §3), PPO's and MDPO's and any learner's
        that does not say otherwise: the ``Config`` and ``HParams`` defaults (orthogonal init, Adam eps
        1e-5, gradient-norm clip 0.5), a batch of ``BATCH_ENVS`` x 400 steps, minibatches of 32, 5 epochs;
        5 x 13 = 65 dual steps per iteration."""
        return {**fields, "n_envs": BATCH_ENVS, "n_steps": 400, "minibatch_size": 32, "epochs": 5, "dual_epochs": 5,
                "dual_epochs_from_policy": False}  # fmt: skip

    def optimizer(self, hp) -> optax.GradientTransformation:
        """The optimizer at ``hp``'s learning rate, eps and clip (may be traced)."""
        return make_optimizer(self.cfg, hp)

    def init_state(self, params, hp):
        """The learner's own state before the first iteration (a pytree of arrays; ``params``
        the first ``{"actor", "critic"}`` variables), kept in ``TrainState.learner_state``, carried
        through the scan (``collect`` and ``update`` read and replace it), checkpointed and
        resumed; the default ``{}``: none."""
        return {}

    @classmethod
    def networks(cls, actor, critic):
        """The ``(actor, critic)`` modules this learner trains, from the config's own
        (``networks.build_networks``, the one place every phase's networks are made: a
        learner that wraps them, e.g. with an observation normaliser, is seen by training,
        the dual phase, the robust methods, evaluation and test alike); default: as they are."""
        return actor, critic

    def learn_keys(self, key) -> tuple[jax.Array, jax.Array]:
        """``(rollout key, update key)``."""
        return tuple(jax.random.split(key))

    def iteration_slot(self, iteration, state, idle, budget=None):
        """One slot of the train scan: ``iteration(state) -> (state, metrics)``. ``idle(state)``
        gives the metrics a slot that does nothing carries over (``episodic`` learners'
        slots past their step budget ``budget``, the run's policy steps, an argument of the
        program (``step.Variant.budget``): ``MCPMD.iteration_slot``)."""
        return iteration(state)

    def collect(self, key, state, hp, per_env: bool = False, fresh_xi=None):
        """1. The iteration's experience: ``(data, state, episode metrics)``. ``per_env``:
        each rollout env runs its own kernel (``state.env_xi``); ``fresh_xi`` the kernels
        envs take when an episode ends (domain randomisation)."""
        raise NotImplementedError

    def signal(self, data, params, lam_tilde, hp, weights=None):
        """2. The Lagrangian learning signal of ``data`` under multiplier ``lam_tilde``.
        ``weights`` ``[n_envs, 1 + m]`` (None: all 1): each rollout env's weight on the reward's
        and each cost's advantage, where a robust method gives the reward and each constraint
        rollout envs of their own worst kernels (``adversary.candidates``, "separate")."""
        raise NotImplementedError

    def update(self, key, state, data, signal, hp, schedule):
        """3. The policy (and critic) update: ``(state, policy steps, metrics)``; the metrics
        hold every key of ``UPDATE_METRICS`` (scalars: ``policy_loss``, ``critic_loss``,
        ``n_updates``, ``policy_epochs`` (the dual phase may read it), ``approx_kl`` and
        ``alpha``). ``schedule``: alpha's ``schedules.Schedule``."""
        raise NotImplementedError
