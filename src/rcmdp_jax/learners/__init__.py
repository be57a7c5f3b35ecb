"""The learners (docs/method.md §2b), one file each behind the ``Learner`` protocol
(``base.py``: ``collect``, ``signal``, ``update``), registered here by the config's
learner name:

* ``ppo`` (``ppo.py``) and ``mdpo`` (``mdpo.py``): batches of auto-resetting steps, GAE,
  epochs of minibatch steps (what they share: ``batch.py``);
* ``mcpmd`` (``mcpmd.py``): one whole episode an iteration, one REINFORCE step.

``register`` adds a learner (a plug-in); the ``Config.learner`` choices are the
registry's names, and ``make_learner`` is the one place a config's learner name is read.
"""

from __future__ import annotations

from rcmdp_jax.learners.base import Learner, make_optimizer
from rcmdp_jax.learners.batch import Batch, BatchLearner, PolicyTerms
from rcmdp_jax.learners.mcpmd import MCPMD
from rcmdp_jax.learners.mdpo import MDPO
from rcmdp_jax.learners.ppo import PPO

_LEARNERS: dict[str, type[Learner]] = {"ppo": PPO, "mdpo": MDPO, "mcpmd": MCPMD}
LEARNER_NAMES = tuple(_LEARNERS)  # the built-in learners (``config.Learner``)


def register(name: str, cls: type[Learner]) -> type[Learner]:
    """Add learner ``cls`` (a ``Learner`` subclass) as ``name``; returns it."""
    if not (isinstance(cls, type) and issubclass(cls, Learner)):
        raise ValueError(f"learner {name!r} must be a subclass of rcmdp_jax.learners.Learner, got {cls!r}")
    if not name or name in _LEARNERS:
        raise ValueError(f"learner {name!r} is empty or registered already")
    _LEARNERS[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove plug-in learner ``name`` (the built-in learners stay)."""
    if name in LEARNER_NAMES:
        raise ValueError(f"learner {name!r} is built in")
    _LEARNERS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered learner's name."""
    return tuple(_LEARNERS)


def get(name: str) -> type[Learner]:
    """The learner class registered as ``name``."""
    if name not in _LEARNERS:
        raise ValueError(f"learner={name!r} is not allowed; choose one of: {', '.join(_LEARNERS)}")
    return _LEARNERS[name]


def episodic(name: str) -> bool:
    """Whether learner ``name`` collects one whole episode an iteration (False for no learner)."""
    return name in _LEARNERS and _LEARNERS[name].episodic


def make_learner(cfg, env, actor, critic) -> Learner:
    """The learner of ``cfg.learner`` for ``env`` and the two networks."""
    return get(cfg.learner)(actor, critic, cfg, env)


__all__ = [
    "LEARNER_NAMES", "MCPMD", "MDPO", "PPO", "Batch", "BatchLearner", "Learner", "PolicyTerms", "episodic", "get",
    "make_learner", "make_optimizer", "names", "register", "unregister",
]  # fmt: skip
