"""CISPO: REINFORCE weighted by the clipped, detached importance ratio."""
from __future__ import annotations

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("cispo")
class CISPO(PolicyLoss):
    """``u = −sg(w)·A·logp`` with ``w = min(r, eps_max)``, or ``w = clamp(r, 1−clip_low, 1+clip_high)`` when
    ``two_sided``. Every token keeps a gradient: ∂u/∂logp = −w·A.

    PPO's clip zeroes the gradient of tokens whose ratio left the trust region, often the rare reflective
    tokens; clipping the (detached) importance weight instead bounds their step without dropping them.
    """

    inert_at_zero_advantage = True
    paper = "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention (arXiv:2506.13585)"
    provenance = "CODE"

    eps_max: float = Field(default=5.0, gt=0)
    two_sided: bool = False
    clip_low: float = Field(default=0.2, ge=0)
    clip_high: float = Field(default=0.2, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        r = ratio(logp, batch.old_logp).detach()
        w = r.clamp(1 - self.clip_low, 1 + self.clip_high) if self.two_sided else r.clamp(max=self.eps_max)
        metrics = {
            "ratio_mean": masked_mean(r, mask),
            "clip_frac_low": masked_mean((w > r).to(mask), mask),
            "clip_frac_high": masked_mean((w < r).to(mask), mask),
        }
        return LossOutput(-w * batch.advantages * logp, metrics)
