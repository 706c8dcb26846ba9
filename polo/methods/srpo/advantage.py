"""SRPO's routing and its GRPO branch: correct rollouts learn from the group advantage, failed rollouts that
have a correct sibling are left to self-distillation (the ``self_distill`` regularizer)."""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats, segment_sum

SRPO_PAPER = ("Unifying Group-Relative and Self-Distillation Policy Optimization via Sample Routing "
              "(arXiv:2604.02288)")


def routed_to_teacher(correct: Tensor, group: Tensor) -> Tensor:
    """``[B]`` bool ``z_i = (1 − c_i)·1[∃ j ≠ i in the group with c_j = 1]``: a failed rollout whose group holds a
    correct one (for a failed row, any correct row of its group is a sibling other than itself)."""
    correct = correct.bool()
    _, inv = torch.unique(group, return_inverse=True)
    solved = segment_sum(correct.to(torch.float32), inv)[inv] > 0
    return ~correct & solved


@ADVANTAGES.register("srpo")
class SRPO(AdvantageEstimator):
    """``A_i = (R_i − mean_g R)/(std_g R + eps)`` (``scale: std``, unbiased std) or ``R_i − mean_g R``
    (``scale: none``, Dr.GRPO), over the *whole* group (failed rollouts included in the mean and std); then
    ``A_i = 0`` on the rows routed to the teacher (``routed_to_teacher`` of the verifier's ``correct``), which
    the ``self_distill`` regularizer trains instead. Their tokens still count in the aggregation's denominator,
    so with ``token_mean`` and ``self_distill`` over every valid token the two branches share one denominator.
    """

    paper = SRPO_PAPER
    provenance = "SECONDARY"
    requires = frozenset({"correct"})

    scale: Literal["std", "none"] = "none"
    """``std``: divide by the group's std (GRPO); ``none``: only subtract the mean (Dr.GRPO, the SDPO/SRPO
    reference recipes' choice)."""
    eps: float = Field(1e-6, gt=0)
    """Added to the std (``scale: std``; veRL's 1e-6)."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        mean, std, _ = group_stats(reward, batch.group)
        adv = reward - mean
        if self.scale == "std":
            adv = adv / (std + self.eps)
        routed = routed_to_teacher(batch.input("correct"), batch.group)
        adv = torch.where(routed, 0.0, adv)
        return AdvantageResult(adv[:, None] * mask, diagnostics={"srpo/routed_frac": float(routed.float().mean())})
