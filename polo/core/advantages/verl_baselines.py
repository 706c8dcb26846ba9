"""Outcome-reward baselines that verl users expect: ReMax, GPG, GRPO pass@k.

Formulas read from volcengine/verl ``verl/trainer/ppo/core_algos.py`` (``compute_remax_outcome_advantage``,
``compute_gpg_outcome_advantage``, ``compute_grpo_passk_outcome_advantage``); no spec section covers them.
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult, SequenceAdvantage
from polo.core.advantages.group_rank import group_pick, group_rank
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("remax")
class ReMax(AdvantageEstimator):
    """ReMax (arXiv 2310.10505): ``A_i = R_i − R_greedy(x_i)``, the reward of a greedy completion of the
    same prompt as baseline (``extras["greedy_reward"]`` ``[B]``); verl ``compute_remax_outcome_advantage``."""

    provenance = "CODE"
    requires = frozenset({"greedy_reward"})

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        adv = batch.scalar_reward().to(mask) - batch.extras["greedy_reward"].to(mask)
        return AdvantageResult(adv[:, None] * mask)


@ADVANTAGES.register("gpg")
class GPG(SequenceAdvantage):
    """GPG (arXiv 2504.02546): ``A_i = α·(R_i − mean_g R)/f_norm`` with ``α = B / max(M, 1)``, which rescales
    the batch gradient by the inverse fraction of samples that carry signal.

    ``valid: groups`` (the paper's correction): M = samples in groups whose rewards are not all equal
    (singleton groups count, their A = α·R is not zero). ``valid: nonzero_reward`` (verl
    ``compute_gpg_outcome_advantage``): M = number of samples with a non-zero reward.
    """

    provenance = "CODE"

    valid: Literal["groups", "nonzero_reward"] = "groups"
    f_norm: float = Field(default=1.0, gt=0)

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, std, _ = group_stats(reward, group)
        signal = std > 0 if self.valid == "groups" else reward != 0
        alpha = len(reward) / signal.sum().clamp_min(1)
        return alpha * (reward - mean) / self.f_norm


@ADVANTAGES.register("grpo_passk")
class GRPOPassK(SequenceAdvantage):
    """Pass@k advantage (arXiv 2503.19595; verl ``compute_grpo_passk_outcome_advantage``): in each group only
    the best sample (lowest index among ties) gets ``A = R_max − R_second``, divided by
    ``std_g R + eps`` when ``scale_by_std``; every other sample gets 0. Groups need ≥ 2 samples."""

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
