"""Trust the Batch (P3O): ESS-capped REINFORCE weights and an ESS-scheduled KL to π_old."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean, masked_sum


def effective_sample_size(r: Tensor, mask: Tensor) -> Tensor:
    """Normalized ESS ``(Σ m·r)² / ((Σ m·r² + 1e-8)·n)`` ∈ (0, 1], n = Σ m; 1 if n = 0 or not finite."""
    n = float(mask.sum())
    ess = masked_sum(r, mask) ** 2 / ((masked_sum(r**2, mask) + 1e-8) * max(n, 1.0))
    return ess if n > 0 and math.isfinite(float(ess)) else torch.ones((), dtype=r.dtype, device=r.device)


@POLICY_LOSSES.register("ess_adaptive")
class ESSAdaptive(PolicyLoss):
    """``ESS`` of the detached token ratios r over the valid tokens of the loss batch (detached scalar);
    ``ρ_t = sg(clamp(r_t, 0, ESS))``; ``KL_t = (logp − old_logp) + exp(clamp(old_logp − logp, −10, 10)) − 1``;
    ``u_t = −ρ_t·A_t·logp_t + (1 − ESS)·KL_t``, so ``token_mean`` gives
    ``[−Σ m·ρ·A·logp + (1 − ESS)·Σ m·KL] / N_global`` (a reference KL and an entropy bonus come from the
    recipe's ``kl`` and ``entropy_coef``). No hyperparameters. Metric ``ess``.

    Near-uniform ratios (fresh data) give ESS ≈ 1: plain REINFORCE without a KL; concentrated ratios (stale or
    mismatched data) lower ESS, which both caps the weights harder and strengthens the pull to π_old.
    Source: FeynRL-project/FeynRL ``algs/P3O/p3o.py``.
    """

    paper = ("Trust the Batch, On- or Off-Policy: Adaptive Policy Optimization for RL Post-Training "
             "(arXiv:2605.12380)")
    provenance = "CODE"

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        r = ratio(logp.detach(), batch.old_logp)
        ess = effective_sample_size(r, mask)
        rho = torch.minimum(r, ess)
        delta = logp - batch.old_logp
        kl = delta + torch.expm1((-delta).clamp(-10, 10))
        metrics = {"ess": ess, "ratio_mean": masked_mean(r, mask), "clip_frac": masked_mean((r > ess).to(mask), mask)}
        return LossOutput(-rho * batch.advantages * logp + (1 - ess) * kl, metrics)
