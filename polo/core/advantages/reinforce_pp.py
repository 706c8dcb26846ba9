"""REINFORCE++ and REINFORCE++-baseline: KL-in-reward returns, whitened over the whole batch."""
from __future__ import annotations

from typing import ClassVar

import torch

from polo.core.advantages.base import AdvantageResult, TokenRewardAdvantage
from polo.core.advantages.gae import gae
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats, masked_whiten


@ADVANTAGES.register("reinforce_pp")
class ReinforcePP(TokenRewardAdvantage):
    """``tok_r = R_i·[last valid token] − kl_coef·kl(old_logp, ref_logp)·mask``;
    ``G_t = Σ_{s≥t} γ^{s−t} tok_r_s`` (masked positions skipped); then ``A = (G − μ)/σ̂`` with μ and σ² the
    mean and variance of G over all valid tokens of the batch (a global, not per-group, normalization):

    * ``unbiased_var: true`` (verl): σ² scaled by n/(n−1), ``σ̂ = sqrt(σ² + 1e-8)``;
    * ``unbiased_var: false`` (OpenRLHF): population σ², ``σ̂ = sqrt(max(σ², 1e-8))`` (floored, not shifted).
    """

    paper = "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language Models (arXiv:2501.03262)"
    provenance = "CODE"

    kl_coef: float = 0.01
    unbiased_var: bool = True
    baseline: ClassVar[bool] = False

    def __call__(self, batch: RolloutBatch, kl_coef: float | None = None) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        if self.baseline:
            reward = reward - group_stats(reward, batch.group)[0]
        returns = gae(self.token_rewards(batch, reward, kl_coef), torch.zeros_like(mask), mask, self.gamma, 1.0)
        floor = None if self.unbiased_var else 1e-8
        return AdvantageResult(masked_whiten(returns, mask, unbiased=self.unbiased_var, var_floor=floor) * mask)


@ADVANTAGES.register("reinforce_pp_baseline")
class ReinforcePPBaseline(ReinforcePP):
    """REINFORCE++ with ``R_i − mean_g R`` in place of R_i (group mean; singleton groups keep R_i)."""

    baseline: ClassVar[bool] = True
