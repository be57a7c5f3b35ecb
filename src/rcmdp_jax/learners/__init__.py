"""The learners (docs/method.md §2b), one file each behind the ``Learner`` protocol
(``base.py``: ``collect``, ``signal``, ``update``), registered here by the config's
learner name:

* ``ppo`` (``ppo.py``) and ``mdpo`` (``mdpo.py``): batches of auto-resetting steps, GAE,
  epochs of minibatch steps (what they share: ``batch.py``);
* ``mcpmd`` (``mcpmd.py``): one whole episode an iteration, one REINFORCE step;
* ``ppo-norm`` (``ppo_norm.py``): PPO on running-normalised observations (its statistics
  are the learner's own state, ``TrainState.learner_state``).

``register`` adds a learner (a plug-in); the ``Config.learner`` choices are the
registry's names, and ``make_learner`` is the one place a config's learner name is read.
"""

from __future__ import annotations

from rcmdp_jax.learners.base import UPDATE_METRICS, Learner, make_optimizer
from rcmdp_jax.learners.batch import Batch, BatchLearner, PolicyTerms
from rcmdp_jax.learners.mcpmd import MCPMD
from rcmdp_jax.learners.mdpo import MDPO
from rcmdp_jax.learners.ppo import PPO
from rcmdp_jax.learners.ppo_norm import PPONorm
from rcmdp_jax.plugin import Registry

REGISTRY = Registry("learner", "rcmdp_jax.learners.base:Learner", {"ppo": PPO, "mdpo": MDPO, "mcpmd": MCPMD,
                                                                    "ppo-norm": PPONorm})  # fmt: skip
LEARNER_NAMES = REGISTRY.builtin  # the built-in learners (``config.Learner``)
unregister, names, items = REGISTRY.unregister, REGISTRY.names, REGISTRY.items


def register(name: str, cls: type) -> type:
    """Add learner ``cls`` (a ``Learner`` subclass) as ``name``; returns it."""
    return REGISTRY.register(name, cls)


def get(name: str) -> type[Learner]:
    """The learner class registered as ``name``."""
    return REGISTRY.get(name, "learner")


def episodic(name: str) -> bool:
    """Whether learner ``name`` collects one whole episode an iteration (False for no learner)."""
    return name in names() and get(name).episodic


def make_learner(cfg, env, actor, critic) -> Learner:
    """The learner of ``cfg.learner`` for ``env`` and the two networks."""
    return get(cfg.learner)(actor, critic, cfg, env)


__all__ = [
    "LEARNER_NAMES", "MCPMD", "MDPO", "PPO", "REGISTRY", "PPONorm", "UPDATE_METRICS", "Batch", "BatchLearner", "Learner",
    "PolicyTerms", "episodic", "get", "items", "make_learner", "make_optimizer", "names", "register", "unregister",
]  # fmt: skip
