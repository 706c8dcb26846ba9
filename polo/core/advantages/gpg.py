"""GPG's advantage: group-mean baseline rescaled by the inverse fraction of samples that carry signal."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("gpg")
class GPG(SequenceAdvantage):
    """``A_i = α·(R_i − mean_g R)/f_norm`` with ``α = B / max(M, 1)``.

    Groups whose rewards are all equal contribute no gradient but still count in the batch mean, which
    shrinks the update; α undoes that shrinkage. ``valid: groups`` (the paper's correction): M = samples in
    groups whose rewards are not all equal (a singleton group counts: its A = α·R is not zero).
    ``valid: nonzero_reward`` (verl's ``compute_gpg_outcome_advantage``): M = samples with a non-zero reward.
    """

    paper = "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning (arXiv:2504.02546)"
    provenance = "CODE"

    valid: Literal["groups", "nonzero_reward"] = "groups"
    f_norm: float = Field(default=1.0, gt=0)

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, std, _ = group_stats(reward, group)
        signal = std > 0 if self.valid == "groups" else reward != 0
        alpha = len(reward) / signal.sum().clamp_min(1)
        return alpha * (reward - mean) / self.f_norm
