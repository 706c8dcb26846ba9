"""Pass@k advantage: only the best sample of each group is credited, by its lead over the runner-up."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_pick, group_rank, group_stats


@ADVANTAGES.register("grpo_passk")
class GRPOPassK(SequenceAdvantage):
    """Within each group, the best sample (lowest index among ties) gets ``A = R_(1) − R_(2)`` (largest minus
    second-largest reward), divided by ``std_g R + eps`` when ``scale_by_std``; every other sample gets 0.

    Under a pass@k objective only the best of the k samples matters, so only it is pushed up, and only by how
    much it beats the next best (a tie at the top gives 0). Groups need ≥ 2 samples. Matches verl's
    ``compute_grpo_passk_outcome_advantage``.
    """

    paper = ("Optimizing Language Models for Inference Time Objectives using Reinforcement Learning "
             "(arXiv:2503.19595)")
    provenance = "CODE"

    scale_by_std: bool = True
    eps: float = 1e-6

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        rank, inv, count = group_rank(-reward, group)
        if (count < 2).any():
            raise ValueError("grpo_passk needs at least 2 samples per group (rollout.samples_per_prompt ≥ 2)")
        best = rank == 0
        adv = group_pick(reward, best, inv) - group_pick(reward, rank == 1, inv)
        if self.scale_by_std:
            adv = adv / (group_stats(reward, group)[1] + self.eps)
        return torch.where(best, adv, 0)
