"""VSPO's advantage: a group z-score whose std is smoothed towards the batch's mean group std, then clipped."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageResult, SequenceAdvantage
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


def smoothed_group_std(reward: Tensor, group: Tensor, eta: float) -> tuple[Tensor, Tensor, Tensor]:
    """Per sample: its group's mean ``μ_g``, smoothed std ``σ̃_g = η·σ_g + (1 − η)·σ̄`` and group size.

    ``σ_g`` is the unbiased std of group g (divisor n_g − 1, from ``group_stats``); ``σ̄`` is the mean of ``σ_g``
    over the groups of the batch that have at least two samples (0 when none has). Singleton groups (whose
    mean and std ``group_stats`` sets to 0 and 1) take no part in ``σ̄``; the caller gives them A = 0.
    """
    mean, std, count = group_stats(reward, group)
    share = torch.where(count > 1, 1 / count, 0.0)  # the samples of a group of n ≥ 2 carry 1/n each
    groups = share.sum()
    std_bar = (std * share).sum() / groups if bool(groups > 0) else reward.new_zeros(())
    return mean, eta * std + (1 - eta) * std_bar, count


@ADVANTAGES.register("vspo")
class VSPO(SequenceAdvantage):
    """Value-smoothing clipped group advantage:

    ``σ̄ = mean_g σ_g`` over the batch's groups (unbiased σ_g), ``σ̃_g = η·σ_g + (1 − η)·σ̄``,
    ``A_i = clip((r_i − μ_g) / (σ̃_g + ε), −c, c)``, broadcast over the response tokens.

    Blending each group's std with the batch mean keeps a nearly-constant group (small σ_g) from getting
    huge advantages, and the clip bounds what is left, so the gradient scale does not jump when the prompt
    sampler changes the batch's composition. A singleton group has no baseline: its sample gets A = 0. With
    η = 1 and c = ∞ this is GRPO. A NaN reward is refused (a ValueError), since it would poison σ̄ for every
    group.

    Paper: VSPO (value-based sampling policy optimization) with progressive reward shaping for
    tool-integrated reasoning (arXiv:2512.07478); reconstructed from its abstract: σ̃ and the clip are this
    library's reading of "value-smoothing clipping".
    """

    paper = "Value-based Sampling Policy Optimization and Progressive Reward Shaping (arXiv:2512.07478)"
    provenance = "RECONSTRUCTED"

    eta: float = Field(0.5, ge=0.0, le=1.0)
    """η: weight of the group's own std in σ̃ (1: the group's std alone, 0: the batch mean alone)."""
    clip: float = Field(3.0, gt=0.0)
    """c: advantages are clipped to [−c, c]."""
    eps: float = Field(1e-6, gt=0.0)

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        return self.unclipped(reward, group).clamp(-self.clip, self.clip)

    def unclipped(self, reward: Tensor, group: Tensor) -> Tensor:
        """``(r_i − μ_g) / (σ̃_g + ε)``, 0 for a singleton group."""
        if not bool(torch.isfinite(reward).all()):
            raise ValueError(f"advantage vspo: rewards must be finite, got {reward.tolist()}")
        mean, smooth, count = smoothed_group_std(reward, group, self.eta)
        return torch.where(count > 1, (reward - mean) / (smooth + self.eps), torch.zeros_like(reward))

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        """The advantages, plus ``vspo/clip_frac`` (samples whose |A| reached c) in the diagnostics."""
        raw = self.unclipped(batch.scalar_reward().to(batch.mask), batch.group)
        adv = raw.clamp(-self.clip, self.clip)
        clipped = float((raw.abs() > self.clip).float().mean()) if raw.numel() else 0.0
        return AdvantageResult(adv[:, None] * batch.mask, diagnostics={"vspo/clip_frac": clipped})
