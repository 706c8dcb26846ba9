"""MC-GRPO: median baseline, MAD scale, the median rollout left out of the loss."""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_pick, group_rank


@ADVANTAGES.register("mc_grpo")
class MCGRPO(AdvantageEstimator):
    """For a group of n = G+1 rewards: pivot ``k* = stable_argsort(R_g)[⌊(n−1)/2⌋]`` (ties by index),
    median ``m = R_{k*}``, ``MAD = lower_median(|R_g − m|)``,
    ``A_j = (R_j − m)/(MAD + eps)`` (``scale: mad``) or ``R_j − m`` (``scale: none``).
    ``keep`` drops the pivot, so G samples per group enter the loss. A singleton group keeps ``A = R``
    and its sample (as in every group estimator here).

    With discrete rewards MAD is usually 0 (more than half of a group shares the median reward), so a sample off
    the median gets ``|A| = |R_j − m|/eps``, up to 1000× its reward gap at ``eps = 1e-3``: the authors' code does
    the same (lotusroot-kim/MC-GRPO ``grpo_trainer_math.py``). Adam normalizes the step and gradient clipping
    bounds it, so the update is nearly scale-free, but the loss, the clip statistics and any scale-sensitive
    optimizer see the raw values (the trainer logs the largest as ``advantage/abs_max``); ``scale: none``
    (``A = R − m``) avoids it. Diagnostic: ``mc_grpo/mad_zero_frac``, the share of samples (in groups of two or
    more) whose group has MAD = 0.

    The median is robust to one outlying reward, so with few samples per prompt fewer advantages flip sign
    than with the mean; sampling G+1 and dropping the pivot (whose A is 0) keeps G samples in the loss.
    """

    paper = ("MC-GRPO: Median-Centered Group Relative Policy Optimization for Small-Rollout Reinforcement "
             "Learning (arXiv:2601.22582)")
    provenance = "CODE"

    scale: Literal["mad", "none"] = "mad"
    eps: float = 1e-3

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        median, pivot, count = self.median(reward, batch.group)
        adv = reward - median
        mad = self.median(adv.abs(), batch.group)[0]
        if self.scale == "mad":
            adv = adv / (mad + self.eps)
        single = count == 1
        adv = torch.where(single, reward, adv)
        mad_zero = float((mad[~single] == 0).to(mask).mean()) if (~single).any() else 0.0
        return AdvantageResult(adv[:, None] * mask, keep=~pivot | single,
                               diagnostics={"mc_grpo/mad_zero_frac": mad_zero})

    @staticmethod
    def median(x: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per sample: its group's lower median, whether it is the median sample, its group size."""
        rank, inv, count = group_rank(x, group)
        pivot = rank == torch.div(count - 1, 2, rounding_mode="floor")
        return group_pick(x, pivot, inv), pivot, count
