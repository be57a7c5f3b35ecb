"""MDPO (docs/method.md §2b, §2d): the batch learner with the KL-penalised objective, its
penalty ``alpha`` on the lane's schedule; the KL by ``cfg.kl_estimator``."""

from __future__ import annotations

from rcmdp_jax import losses
from rcmdp_jax.learners.batch import BatchLearner, PolicyTerms


class MDPO(BatchLearner):
    def policy_loss(self, terms: PolicyTerms, hp):
        if self.cfg.kl_estimator == "exact":
            kl = losses.exact_kl(terms.dist, self.actor.apply(terms.old_actor_params, terms.obs))
        else:
            kl = losses.reference_kl(terms.log_ratio)
        return losses.mdpo_loss(terms.log_ratio, terms.advantage, kl, terms.alpha)
