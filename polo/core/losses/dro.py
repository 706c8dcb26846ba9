"""DRO: direct reward optimisation, a policy gradient with a quadratic log-ratio penalty."""
from __future__ import annotations

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("dro")
class DRO(PolicyLoss):
    """``u_t = −A_t·logp_t + (β/2)·(logp_t − old_logp_t)²`` (minimized).

    Neither verl (policy losses vanilla, gspo, sapo, gpg, clip_cov, kl_cov, geo_mean, cispo, …) nor TRL
    (``loss_type`` grpo, bnpo, dr_grpo, dapo, cispo, sapo, …) registers a "DRO" loss. This is the closest
    published policy-optimization objective of that name: Direct Reward Optimisation (Richemond et al.
    2024, arXiv 2405.19107), in the per-token form Kimi k1.5 (arXiv 2501.12599) trains with and Thinking
    Machines' Tinker ships as loss ``dro`` (default β = 0.05): the quadratic penalty keeps the learner
    near the sampling policy, with gradient ``−A_t + β·(logp_t − old_logp_t)``. Kimi uses a mean-reward
    baseline, so pair with ``dr_grpo`` advantages.
    """

    paper = "Offline Regularised Reinforcement Learning for Large Language Models Alignment (arXiv:2405.19107)"
    provenance = "SECONDARY"

    beta: float = Field(default=0.05, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        delta = logp - batch.old_logp
        metrics = {"ratio_mean": masked_mean(ratio(logp.detach(), batch.old_logp), mask),
                   "log_ratio_sq": masked_mean(delta.detach() ** 2, mask)}
        return LossOutput(-batch.advantages * logp + 0.5 * self.beta * delta**2, metrics)
