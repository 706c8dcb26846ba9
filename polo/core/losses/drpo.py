"""DRPO: decoupled reward policy optimization, a discriminative per-question objective."""
from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import Field, PrivateAttr, field_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.divergences import DIVERGENCES
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import group_reward_spread, masked_mean, segment_sum


def segment_logsumexp(x: Tensor, inv: Tensor, member: Tensor, num_groups: int) -> Tensor:
    """``log Σ_{i: inv[i]=g, member[i]} exp(x_i)`` per group ``[G]``; −inf (with zero gradient) where empty."""
    x = x.masked_fill(~member, -math.inf)
    top = torch.full((num_groups,), -math.inf, dtype=x.dtype, device=x.device)
    top = top.scatter_reduce(0, inv, x.detach(), reduce="amax")
    top = torch.where(torch.isfinite(top), top, 0.0)
    total = segment_sum(torch.exp(x - top[inv]), inv, num_groups)
    return top + total.clamp_min(torch.finfo(x.dtype).tiny).log().masked_fill(total == 0, -math.inf)


@POLICY_LOSSES.register("drpo")
class DRPO(PolicyLoss):
    """Per question x (group) with ≥ 1 correct and ≥ 1 wrong response (``extras["correct"]``):

    ``s_i = Σ_t m·logp / Σ_t m``, ``ℓ_i = L_i / L_max``,
    ``q_i = softmax_{pos}((1 − ℓ_i)/λ)`` (positive-only length weights, summing to 1),
    ``J_x = Σ_{pos} q_i·s_i − τ·log Σ_{neg} exp(s_j/τ)``, ``J = (1/P_all) Σ_x J_x`` where P_all counts every
    group of the (micro-)batch, skipped ones included. Trust region to π_old:
    ``KL = masked_mean(old_logp − logp)`` (``kl_type: k3`` for the k3 form),
    ``loss = −J + sg(max(β(KL − δ), 0))·KL``, returned as ``LossOutput.loss``.

    The value uses τ·logsumexp (the reference code's τ·S/sg(S) has the same gradient); ``token_loss``
    spreads each row's share of −J evenly over its tokens (metrics only). ``L_max`` = ``max_length`` or the
    padded response width.

    Correct responses are weighted only against each other (shorter ones more), so a length preference never
    turns a correct answer's signal negative; wrong responses are pushed down through the soft maximum of
    their scores. The weights act only where a group's correct responses differ in length: where they share one
    (every correct answer of an addition problem is the same string) q is uniform and DRPO is its discriminative
    objective alone. Metric ``length_weight_spread``: ``max q − min q`` over each used group's correct responses,
    averaged over the used groups (0 then).

    ``whole_groups``: J_x needs every response of question x, so the updater cuts micro-batches on group
    boundaries (and refuses a ``train.micro_batch_size`` that would split a group). The trust-region multiplier
    ``sg(max(β(KL − δ), 0))`` is computed per micro-batch, from the KL over that micro-batch's tokens: with
    several micro-batches per optimizer step each gets its own multiplier (one whose KL is below δ gets none
    even when the minibatch as a whole is above it), so it changes with ``train.micro_batch_size``.
    Source: Optimization-AI/DRPO ``compute_policy_loss_drpo``.
    """

    paper = "DRPO: Efficient Reasoning via Decoupled Reward Policy Optimization (arXiv:2510.04474)"
    provenance = "CODE"
    whole_groups: ClassVar[bool] = True
    requires = frozenset({"old_logp", "correct"})

    length_temperature: float = Field(default=0.1, gt=0)
    """λ of the positive weights."""
    tau: float = Field(default=10.0, gt=0)
    delta: float = Field(default=1e-4, ge=0)
    beta: float = Field(default=1e3, ge=0)
    kl_type: str = "k1"
    max_length: int | None = Field(default=None, gt=0)

    _divergence = PrivateAttr(default=None)

    @field_validator("kl_type")
    @classmethod
    def _known_divergence(cls, name: str) -> str:
        DIVERGENCES.get(name)
        return name

    def model_post_init(self, context) -> None:
        self._divergence = DIVERGENCES.build(self.kl_type)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        pos = batch.extras["correct"].to(mask.device) > 0.5
        neg = ~pos
        _, inv = torch.unique(batch.group, return_inverse=True)
        G = int(inv.max()) + 1 if inv.numel() else 0
        used = (segment_sum(pos.to(mask), inv, G) > 0) & (segment_sum(neg.to(mask), inv, G) > 0)

        s = masked_mean(logp, mask, dim=-1)
        ell = batch.lengths.to(mask) / (self.max_length or mask.shape[1])
        z = (1 - ell) / self.length_temperature
        q = torch.exp(z - segment_logsumexp(z, inv, pos, G)[inv]).masked_fill(~pos, 0.0)
        neg_lse = segment_logsumexp(s / self.tau, inv, neg, G)
        J_x = torch.where(used, segment_sum(q * s, inv, G) - self.tau * neg_lse, 0.0)
        J = J_x.sum() / max(G, 1)

        kl = masked_mean(self._divergence(batch.old_logp, logp), mask)
        multiplier = (self.beta * (kl.detach() - self.delta)).clamp_min(0)
        loss = -J + multiplier * kl

        with torch.no_grad():  # each row's share of −J_x, spread over its tokens
            p_neg = torch.exp(s / self.tau - neg_lse[inv]).masked_fill(~neg, 0.0)
            share = torch.where(used[inv], -(q * s - p_neg * self.tau * neg_lse[inv]), 0.0)
            token_loss = share[:, None] * mask / mask.sum(-1, keepdim=True).clamp_min(1)
            scored = pos & used[inv]  # max − min of q over each used group's correct responses, averaged
            spread = group_reward_spread(q[scored], batch.group[scored]).mean() if scored.any() else q.new_zeros(())
        metrics = {
            "drpo_objective": J.detach(),
            "kl_old": kl.detach(),
            "trust_region_multiplier": multiplier,
            "groups_used": used.to(mask).mean() if G else torch.zeros(()),
            "length_weight_spread": spread,
            "ratio_mean": masked_mean(ratio(logp.detach(), batch.old_logp), mask),
        }
        return LossOutput(token_loss, metrics, loss=loss)
