"""PPO (docs/method.md §2b): the batch learner with the clipped surrogate, stopping its epochs
early by ``cfg.kl_check``."""

from __future__ import annotations

from rcmdp_jax import losses
from rcmdp_jax.learners.batch import BatchLearner, PolicyTerms


class PPO(BatchLearner):
    @property
    def kl_stop(self) -> str:
        return self.cfg.kl_check

    def policy_loss(self, terms: PolicyTerms, hp):
        return losses.ppo_loss(terms.log_ratio, terms.advantage, hp.clip_eps)
