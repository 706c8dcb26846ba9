"""PPO clipped surrogate with optional dual clip (verl "vanilla")."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("ppo_clip")
class PPOClip(PolicyLoss):
    """``u = max(−A·r, −A·clamp(r, 1−ε_low, 1+ε_high))``; dual clip c > 1: ``u = min(u, −A·c)`` where A < 0.

    ``r = exp(clamp(logp − old_logp, −20, 20))``. Gradient flows only where the unclipped branch −A·r is
    selected.

    The max makes the objective a pessimistic bound: moving the ratio beyond ``[1−ε_low, 1+ε_high]`` in the
    direction the advantage favours earns nothing. The dual clip (from "Mastering Complex Control in MOBA Games
    with Deep Reinforcement Learning", arXiv:1912.09729) also bounds the loss of a negative-advantage token
    whose ratio has grown large.
    """

    inert_at_zero_advantage = True
    paper = "Proximal Policy Optimization Algorithms (arXiv:1707.06347)"
    provenance = "CODE"

    clip_low: float = Field(default=0.2, ge=0)
    clip_high: float = Field(default=0.2, ge=0)
    dual_clip: float | None = Field(default=None, gt=1)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        r = ratio(logp, batch.old_logp)
        u, metrics = clipped_surrogate(r, adv, mask, self.clip_low, self.clip_high)
        if self.dual_clip is not None:
            u3 = -adv * self.dual_clip
            dual = (adv < 0) & (u > u3)
            metrics["clip_frac_dual"] = masked_mean(dual.to(mask), mask)
            u = torch.where(dual, u3, u)
        return LossOutput(u, metrics)
