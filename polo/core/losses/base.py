"""Policy losses: ``logp[B,T]`` (with grad) and the batch → per-token loss ``u[B,T]`` to minimize."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import Component
from polo.core.segment import masked_mean


@dataclass
class LossOutput:
    token_loss: Tensor  # [B,T] per-token loss to be aggregated (minimized)
    metrics: dict[str, Tensor]  # detached scalar diagnostics, means over valid tokens
    loss: Tensor | None = None
    """Scalar objective for losses that are not a sum of token terms (e.g. per-question DRPO): normalized
    over this micro-batch's whole groups; the trainer then skips aggregation and weights it by the
    micro-batch's share of the minibatch rows. ``token_loss`` still carries per-token values for metrics."""


class PolicyLoss(Component):
    """``logp`` (with grad) and the batch (old_logp, advantages, response_mask) → ``LossOutput``."""

    requires = frozenset({"old_logp"})
    inert_at_zero_advantage: ClassVar[bool] = False
    """True when a row whose advantages are all 0 has ``u = 0`` and ``∂u/∂logp = 0`` on every token (the
    loss is a sum of per-row terms, each proportional to the row's advantages): the updater then leaves
    such rows out of the forward/backward, which does not change the gradient."""
    training_hidden_layer: ClassVar[int | None] = None
    """A hidden layer the loss reads from the training forward, with gradient (OPPO's contexts): the updater then
    calls ``loss(logp, batch, hidden=...)`` with ``hidden`` ``[B, Tp + T, d]`` of that layer; None: no hidden."""

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        raise NotImplementedError


def ratio(logp: Tensor, old_logp: Tensor) -> Tensor:
    """Importance ratio ``r = exp(clamp(logp − old_logp, −20, 20))``."""
    return torch.exp((logp - old_logp).clamp(-20, 20))


def clipped_surrogate(
    r: Tensor, adv: Tensor, mask: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """``u = max(−A·r, −A·clamp(r, 1−clip_low, 1+clip_high))``: no gradient where the clipped branch is taken.

    Metrics: ``ratio_mean`` and the fractions of valid tokens clipped at the lower bound (A < 0) and at
    the upper bound (A > 0).
    """
    u1 = -adv * r
    u2 = -adv * r.clamp(1 - clip_low, 1 + clip_high)
    clipped = (u2 > u1).to(mask)
    metrics = {
        "ratio_mean": masked_mean(r.detach(), mask),
        "clip_frac_low": masked_mean(clipped * (adv < 0), mask),
        "clip_frac_high": masked_mean(clipped * (adv > 0), mask),
    }
    return torch.maximum(u1, u2), metrics
