"""DGPO token credit: Hellinger-deviation × entropy scores through a temperature softmax."""
from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.credit.base import TokenCredit
from polo.core.losses.entropy import entropy_from_logits
from polo.core.registry import CREDIT


def dgpo_scores(old_lp: Tensor, ref_lp: Tensor, kappa: float) -> Tensor:
    """``s = d·H̃^κ`` ``[B,T]`` from full-vocabulary log-probs ``[B,T,V]``: ``d = 1 − Σ_v sqrt(π·π_ref)``,
    ``H̃ = H(π)/ln|V|``."""
    d = (1 - torch.exp((old_lp + ref_lp) / 2).sum(-1)).clamp_min(0)
    h = entropy_from_logits(old_lp) / math.log(old_lp.shape[-1])
    return d * h.clamp_min(0) ** kappa


@CREDIT.register("dgpo_hellinger")
class DGPOHellinger(TokenCredit):
    """With π = π_old(·|s_t) (``extras["old_dist"]``) and π_ref (``extras["ref_dist"]``), both ``[B,T,V]``
    full-vocabulary log-probs:

    ``d_t = 1 − Σ_v sqrt(π(v)·π_ref(v))`` (squared Hellinger), ``H̃_t = H(π)/ln|V|``, ``s_t = d_t·H̃_t^κ``,
    ``w_t = T_i·softmax_{valid t'}(s_{t'}/τ)`` (weights of a row sum to its T_i valid tokens; 0 on padding).

    The bounded Hellinger distance measures how far the policy has moved from the reference at a token; the
    entropy gate keeps confident (low-entropy) deviations from drawing credit. The response's advantage is then
    redistributed toward the high-score tokens. RECONSTRUCTED FROM ABSTRACT, cross-checked with two third-party
    implementations; τ = 0.5 and κ = 1 are their defaults.
    """

    paper = "DGPO: Distribution Guided Policy Optimization for Fine Grained Credit Assignment (arXiv:2605.03327)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"old_dist", "ref_dist"})

    tau: float = Field(default=0.5, gt=0)
    kappa: float = Field(default=1.0, ge=0)

    @torch.no_grad()
    def __call__(self, batch: RolloutBatch) -> Tensor:
        mask = batch.mask
        s = dgpo_scores(batch.extras["old_dist"], batch.extras["ref_dist"], self.kappa).to(mask)
        z = (s / self.tau).masked_fill(mask == 0, -math.inf)
        return torch.softmax(z, -1).nan_to_num(0.0) * mask.sum(-1, keepdim=True) * mask
