"""The learners (docs/method.md §2b), one type per way of learning, each with ``collect`` (the
iteration's experience), ``signal`` (the Lagrangian learning signal) and ``update``:
``BatchLearner`` (PPO, MDPO: ``rcmdp_jax.batch_learner``) and ``EpisodeLearner`` (MCPMD:
``rcmdp_jax.episode_learner``). ``make_learner`` is the one place a config's learner
name is read."""

from __future__ import annotations

import functools
import math

import optax

from rcmdp_jax.batch_learner import Batch, BatchLearner, mdpo_policy_loss, ppo_policy_loss  # noqa: F401
from rcmdp_jax.episode_learner import EpisodeLearner


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


def make_learner(cfg, env, actor, critic) -> BatchLearner | EpisodeLearner:
    """The learner of ``cfg.learner``: "ppo" and "mdpo" (a batch, given their policy loss;
    PPO stops its epochs early by ``cfg.kl_check``), "mcpmd" (an episode)."""
    optimizer = functools.partial(make_optimizer, cfg)
    if cfg.learner == "mcpmd":
        return EpisodeLearner(actor, critic, cfg, env, optimizer)
    ppo = cfg.learner == "ppo"
    return BatchLearner(actor, critic, cfg, env, ppo_policy_loss if ppo else mdpo_policy_loss,
                        cfg.kl_check if ppo else None, optimizer)  # fmt: skip
