"""GMPO: geometric-mean policy optimization with token-level clipping in log space."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("gmpo")
class GMPO(PolicyLoss):
    """``δ_t = clamp(logp_t − old_logp_t, −20, 20)``; token clip in log space, pessimistic in the sign of A:
    ``δ̃_t = sgn(A)·min(sgn(A)·δ_t, sgn(A)·clamp(δ_t, −ε_low, ε_high))``;
    sequence ratio ``ρ_i = exp(Σ_t m·δ̃_t / Σ_t m)``, ``Ā_i = Σ_t m·A_t / Σ_t m``; every token of row i
    carries ``u = −Ā_i·ρ_i``, so ``seq_mean_token_mean`` gives verl's ``mean_i(−Ā_i·ρ_i)``.
    The geometric mean of the token ratios is far less sensitive to a single outlying token than GRPO's
    arithmetic mean, so a wider clip range (e^±0.4) stays stable. Read from verl
    ``verl/trainer/ppo/core_algos.py::compute_policy_loss_geo_mean``.
    """

    paper = "Geometric-Mean Policy Optimization (arXiv:2507.20673)"

    provenance = "CODE"

    clip_low: float = Field(default=0.4, ge=0)
    clip_high: float = Field(default=0.4, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        delta = (logp - batch.old_logp).clamp(-20, 20)
        sign = torch.sign(adv)
        clamped = delta.clamp(-self.clip_low, self.clip_high)
        delta_min = sign * torch.minimum(sign * delta, sign * clamped)
        seq_ratio = masked_mean(delta_min, mask, dim=-1).exp()
        seq_adv = masked_mean(adv, mask, dim=-1)
        u = (-seq_adv * seq_ratio)[:, None] * mask
        clipped = (delta != clamped).to(mask)
        metrics = {
            "ratio_mean": masked_mean(seq_ratio.detach(), (mask.sum(-1) > 0).to(mask)),
            "clip_frac_high": masked_mean(clipped * (adv > 0), mask),
            "clip_frac_low": masked_mean(clipped * (adv < 0), mask),
        }
        return LossOutput(u, metrics)
