"""Group-relative sequence advantages: GRPO, Dr.GRPO, RLOO."""
from __future__ import annotations

from torch import Tensor

from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("grpo")
class GRPO(SequenceAdvantage):
    """``A_i = (R_i − mean_g R) / (std_g R + eps)`` (unbiased std); ``R_i − mean_g R`` if not ``scale_by_std``.

    The G samples of a prompt are their own baseline: no critic, one z-score per group.
    """

    paper = ("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models "
             "(arXiv:2402.03300)")
    provenance = "CODE"

    scale_by_std: bool = True
    eps: float = 1e-6

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, std, _ = group_stats(reward, group)
        return (reward - mean) / (std + self.eps) if self.scale_by_std else reward - mean


@ADVANTAGES.register("dr_grpo")
class DrGRPO(SequenceAdvantage):
    """``A_i = R_i − mean_g R`` (no std scaling): dividing by the group's std up-weights prompts that are nearly
    always solved or nearly always failed, a difficulty bias that Dr.GRPO removes."""

    paper = "Understanding R1-Zero-Like Training: A Critical Perspective (arXiv:2503.20783)"
    provenance = "CODE"

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        return reward - group_stats(reward, group)[0]


@ADVANTAGES.register("rloo")
class RLOO(SequenceAdvantage):
    """Leave-one-out baseline: ``A_i = R_i − mean_{j≠i} R_j = G/(G−1)·(R_i − mean_g R)``; G = 1 → A = R.

    The baseline of each sample does not depend on the sample itself, so the estimator stays unbiased.
    """

    paper = ("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs "
             "(arXiv:2402.14740)")
    provenance = "CODE"

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, _, count = group_stats(reward, group)
        return count / (count - 1).clamp_min(1) * (reward - mean)
