"""InfoPPO's adaptive clip: a per-token clip range that widens with the behaviour policy's entropy."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.info_gae import information_density
from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("info_adaptive_clip")
class InfoAdaptiveClip(PolicyLoss):
    """PPO clip with information-time bounds ``[lo_t, hi_t]``:

    ``ρ_t = clamp(H_t / max_batch H, 0, 1)`` (H = entropy of π_old, ``extras["entropy_old"]``),
    ``lo_t = 1/(1 + ln(1 + ε_lo·ρ_t))``, ``hi_t = 1 + ln(1 + ε_hi·ρ_t)``,
    ``u_t = max(−A_t·r_t, −A_t·clamp(r_t, lo_t, hi_t))``; ρ = 0 pins the ratio to [1, 1]. Use ``token_mean``.

    Uncertain states (high information density) may move further, confident ones are held tight.
    RECONSTRUCTED FROM ABSTRACT, cross-checked with a third-party port that cites the paper's appendix for the
    clip form and ε_lo = 10, ε_hi = 20. The max entropy is taken over the batch the loss sees (the micro-batch
    when the trainer splits one).
    """

    paper = "Information-Time Proximal Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"old_logp", "entropy_old"})

    eps_lo: float = Field(default=10.0, ge=0)
    """ε_lo: how far an uncertain token's ratio may fall (lo = 1/(1 + ln 11) ≈ 0.29 at ρ = 1)."""
    eps_hi: float = Field(default=20.0, ge=0)
    """ε_hi: how far it may rise (hi = 1 + ln 21 ≈ 4.04 at ρ = 1)."""

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        rho = information_density(batch.extras["entropy_old"].to(mask), mask)
        lo = 1 / (1 + torch.log1p(self.eps_lo * rho))
        hi = 1 + torch.log1p(self.eps_hi * rho)
        u, metrics = clipped_surrogate(ratio(logp, batch.old_logp), batch.advantages, mask, 1 - lo, hi - 1)
        metrics["density_mean"] = masked_mean(rho, mask)
        return LossOutput(u, metrics)
