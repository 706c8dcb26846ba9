"""OBLR-PO's baseline: a group baseline weighted by each sample's squared score-function norm."""
from __future__ import annotations

from typing import Literal

from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.weighted_group_baseline import logit_grad_proxy, weighted_group_baseline
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


@ADVANTAGES.register("oblr_weighted_baseline")
class OBLRWeightedBaseline(AdvantageEstimator):
    """``A_i = R_i − b_i``, ``b_i = Σ_{j≠i} ω_j R_j / Σ_{j≠i} ω_j`` (all j of the group when not
    ``leave_one_out``), no std scaling; a singleton group keeps ``A = R``.

    ω_j stands in for ‖∇_θ log π(y_j)‖², the weight under which a baseline minimizes the gradient variance:
    ``logit_grad``: ``ω_j = Σ_t m·(1 − 2π_t + Σ_v π(v)²)`` (the squared logit-gradient norm summed over the
    response; needs ``old_logp`` and ``sum_pi_sq``); ``length``: ``ω_j = |y_j|``.

    RECONSTRUCTED FROM ABSTRACT: the paper derives an optimal gradient-weighted baseline but its per-sample
    proxy for the gradient norm is our choice.
    """

    paper = "OBLR-PO: A Theoretical Framework for Stable Reinforcement Learning (arXiv:2511.23310)"
    provenance = "RECONSTRUCTED"

    proxy: Literal["logit_grad", "length"] = "logit_grad"
    leave_one_out: bool = True

    def needs(self) -> set[str]:
        return set(self.requires) | ({"old_logp", "sum_pi_sq"} if self.proxy == "logit_grad" else set())

    def weights(self, batch: RolloutBatch) -> Tensor:
        """``ω`` ``[B]``."""
        mask = batch.mask
        if self.proxy == "length":
            return mask.sum(-1)
        return logit_grad_proxy(batch.old_logp.to(mask), batch.extras["sum_pi_sq"].to(mask), mask).sum(-1)

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        adv = reward - weighted_group_baseline(reward, self.weights(batch), batch.group, self.leave_one_out)
        return AdvantageResult(adv[:, None] * mask)
