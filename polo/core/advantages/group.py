"""Group-relative sequence advantages: GRPO (§2), Dr.GRPO (§3), RLOO (§7)."""
from __future__ import annotations

from torch import Tensor

from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("grpo")
class GRPO(SequenceAdvantage):
    """``A_i = (R_i − mean_g R) / (std_g R + eps)`` (unbiased std); ``R_i − mean_g R`` if not ``scale_by_std``."""

    spec = "single_turn_core.md §2"
    provenance = "CODE"

    scale_by_std: bool = True
    eps: float = 1e-6

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, std, _ = group_stats(reward, group)
        return (reward - mean) / (std + self.eps) if self.scale_by_std else reward - mean


@ADVANTAGES.register("dr_grpo")
class DrGRPO(SequenceAdvantage):
    """``A_i = R_i − mean_g R`` (no std scaling)."""

    spec = "single_turn_core.md §3"
    provenance = "CODE"

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        return reward - group_stats(reward, group)[0]


@ADVANTAGES.register("rloo")
class RLOO(SequenceAdvantage):
    """Leave-one-out baseline: ``A_i = R_i − mean_{j≠i} R_j = G/(G−1)·(R_i − mean_g R)``; G = 1 → A = R."""

    spec = "single_turn_core.md §7"
    provenance = "CODE"

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, _, count = group_stats(reward, group)
        return count / (count - 1).clamp_min(1) * (reward - mean)
