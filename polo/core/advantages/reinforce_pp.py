"""REINFORCE++ and REINFORCE++-baseline: KL-in-reward returns, whitened over the batch (spec §8)."""
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
    ``G_t = Σ_{s≥t} γ^{s−t} tok_r_s`` (masked positions skipped); ``adv = masked_whiten(G, mask)`` over
    all valid tokens of the batch (unbiased variance as verl, else population as OpenRLHF)."""

    spec = "single_turn_core.md §8"
    provenance = "CODE"

    kl_coef: float = 0.01
    unbiased_var: bool = True
    baseline: ClassVar[bool] = False

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        if self.baseline:
            reward = reward - group_stats(reward, batch.group)[0]
        returns = gae(self.token_rewards(batch, reward), torch.zeros_like(mask), mask, self.gamma, 1.0)
        return AdvantageResult(masked_whiten(returns, mask, unbiased=self.unbiased_var) * mask)


@ADVANTAGES.register("reinforce_pp_baseline")
class ReinforcePPBaseline(ReinforcePP):
    """REINFORCE++ with ``R_i − mean_g R`` in place of R_i (group mean; singleton groups keep R_i)."""

    baseline: ClassVar[bool] = True
