"""PPO (docs/method.md §2b): the batch learner with the clipped surrogate, stopping its epochs
early by ``cfg.kl_check``."""

from __future__ import annotations

from rcmdp_jax import losses
from rcmdp_jax.env_settings import check_count_setting
from rcmdp_jax.learners.batch import BatchLearner, PolicyTerms
from rcmdp_jax.plugin import Number


class PPO(BatchLearner):
    # per environment (``LearnerSpec.plugins["ppo"]``): its epochs, the target KL that stops them
    # (an HParams field), and whether the dual phase runs as many epochs as the policy did
    env_settings = {
        "epochs": 10,
        "target_kl": Number(0.02, 0.0, open_low=True, inf="inf: no early stop"),
        "dual_epochs_from_policy": False,
    }

    @classmethod
    def check_settings(cls, settings):
        check_count_setting("ppo", "epochs", settings["epochs"])

    @classmethod
    def preset(cls, fields, settings, domain):
        fields = super().preset(fields, settings, domain)
        from_policy = settings["dual_epochs_from_policy"]
        return {**fields, "epochs": settings["epochs"], "dual_epochs_from_policy": from_policy,
                "dual_epochs": settings["epochs"] if from_policy else fields["dual_epochs"],
                "hparams": {**fields["hparams"], "target_kl": settings["target_kl"]}}  # fmt: skip

    @property
    def kl_stop(self) -> str:
        return self.cfg.kl_check

    def policy_loss(self, terms: PolicyTerms, hp):
        return losses.ppo_loss(terms.log_ratio, terms.advantage, hp.clip_eps)
