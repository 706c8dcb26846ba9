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
    and its sample (as in every group estimator here). With binary rewards MAD is usually 0, so |A| = 1/eps
    (the reference code's behaviour; Adam and gradient clipping make the step nearly scale-free).

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
        if self.scale == "mad":
            adv = adv / (self.median(adv.abs(), batch.group)[0] + self.eps)
        single = count == 1
        adv = torch.where(single, reward, adv)
        return AdvantageResult(adv[:, None] * mask, keep=~pivot | single)

    @staticmethod
    def median(x: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per sample: its group's lower median, whether it is the median sample, its group size."""
        rank, inv, count = group_rank(x, group)
        pivot = rank == torch.div(count - 1, 2, rounding_mode="floor")
        return group_pick(x, pivot, inv), pivot, count
