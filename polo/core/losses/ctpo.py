"""CTPO: cumulative-token importance ratios with a √position log-space clip window."""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("ctpo_cumulative")
class CTPOCumulative(PolicyLoss):
    """``δ_t = clamp(logp_t − old_logp_t, −20, 20)``, ``C_t = Σ_{s≤t} m_s·δ_s`` (``cumprod``) or
    ``C_t / n_t`` (``geomean``), ``n_t = Σ_{s≤t} m_s`` (trained tokens only, ≥ 1).

    ``ℓ_t = min(sg(C_t) + logp_t − sg(logp_t), 10)``, ``r_t = exp(ℓ_t)`` (value: the cumulative ratio;
    gradient: through the current token only). Bounds ``b = c·n_t^p`` (p = +0.5 cumprod, −0.5 geomean
    unless ``power`` is set); ``u = max(−A·r, −A·exp(clamp(ℓ, −b_lo, b_hi)))``; if A < 0:
    ``u = min(u, −A·exp(b_c))`` (dual clip). Use ``token_mean``.
    The product of the ratios up to t corrects for the prefix having been sampled by π_old (an unbiased
    per-token correction with less variance than the whole-sequence ratio); its log is a sum of t terms, so
    it spreads like √t and the clip window grows with it.
    Source: horizon-llm/CTPO ``_compute_policy_loss_cum_token_la_impl``.
    """

    paper = ("Rethinking Importance Sampling in LLM Policy Optimization: A Cumulative Token Perspective "
             "(arXiv:2605.07331)")
    provenance = "CODE"

    mode: Literal["cumprod", "geomean"] = "cumprod"
    power: float | None = None
    c_lo: float = Field(default=0.025, ge=0)
    c_hi: float = Field(default=0.05, ge=0)
    c_c: float = Field(default=0.05, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        delta = (logp - batch.old_logp).detach().clamp(-20, 20)
        cum = (mask * delta).cumsum(-1)
        n = mask.cumsum(-1).clamp_min(1)
        if self.mode == "geomean":
            cum = cum / n
        log_r = (cum + logp - logp.detach()).clamp(max=10)
        scale = n ** (self.power if self.power is not None else (0.5 if self.mode == "cumprod" else -0.5))
        b_lo, b_hi = self.c_lo * scale, self.c_hi * scale
        u, metrics = clipped_surrogate(log_r.exp(), adv, mask, -torch.expm1(-b_lo), torch.expm1(b_hi))
        u_dual = -adv * torch.exp(self.c_c * scale)
        dual = (adv < 0) & (u > u_dual)
        metrics["clip_frac_dual"] = masked_mean(dual.to(mask), mask)
        return LossOutput(torch.where(dual, u_dual, u), metrics)
