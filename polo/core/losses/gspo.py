"""GSPO: one clipped, length-normalized sequence ratio per response."""
from __future__ import annotations

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("gspo")
class GSPO(PolicyLoss):
    """``log s_i = Σ_t m·(logp − old_logp) / Σ_t m``; token form
    ``log s_{i,t} = sg(log s_i) + logp_t − sg(logp_t)`` (clamped ≤ 10);
    ``u = max(−A·s, −A·clamp(s, 1−ε_low, 1+ε_high))``. Use with ``seq_mean_token_mean``.

    The reward is given per sequence, so the importance ratio and its clip are taken per sequence too (the
    geometric mean of the token ratios); every token of a response shares one clipping decision.
    """

    inert_at_zero_advantage = True
    paper = "Group Sequence Policy Optimization (arXiv:2507.18071)"
    provenance = "CODE"

    clip_low: float = Field(default=3e-4, ge=0)
    clip_high: float = Field(default=4e-4, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        log_s = masked_mean(logp - batch.old_logp, mask, dim=-1).detach()
        s = (log_s[:, None] + logp - logp.detach()).clamp(max=10).exp()
        u, metrics = clipped_surrogate(s, batch.advantages, mask, self.clip_low, self.clip_high)
        return LossOutput(u, metrics)
