"""Train only on the high-entropy "forking" tokens (Wang et al. 2025, "Beyond the 80/20 Rule")."""
from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.credit.base import TokenCredit
from polo.core.registry import CREDIT


@CREDIT.register("top_entropy_quantile")
class TopEntropyQuantile(TokenCredit):
    """``w_t = 1`` on the valid tokens whose behaviour entropy (``extras["entropy_old"]``) is among the top
    ``ρ`` fraction of the batch's valid tokens (``H_t ≥`` the ⌈ρ·n⌉-th largest; ties kept), else 0.

    ``rescale: true`` uses ``n/k`` instead of 1 (k kept of n valid tokens), so that ``token_mean`` over all
    tokens equals the mean over the kept tokens, as when the paper masks the rest out of the loss.
    The paper finds that a small minority of high-entropy "forking" tokens carries nearly all of the useful
    RLVR gradient; its recipe keeps the top 20% of tokens by entropy, per batch.
    """

    paper = ("Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for LLM "
             "Reasoning (arXiv:2506.01939)")

    provenance = "PAPER"
    requires = frozenset({"entropy_old"})

    rho: float = Field(default=0.2, gt=0, le=1)
    rescale: bool = False

    @torch.no_grad()
    def __call__(self, batch: RolloutBatch) -> Tensor:
        mask = batch.mask
        valid = mask.bool()
        n = int(valid.sum())
        if n == 0:
            return torch.zeros_like(mask)
        entropy = batch.extras["entropy_old"].to(mask)
        threshold = entropy[valid].topk(math.ceil(self.rho * n)).values[-1]
        keep = ((entropy >= threshold) & valid).to(mask)
        return keep * (n / keep.sum()) if self.rescale else keep
