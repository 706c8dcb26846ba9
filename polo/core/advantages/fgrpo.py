"""F-GRPO: a separate group-relative advantage for each tagged phase of a response (slate, then rank)."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.agent_primitives import group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


def phase_advantages(rewards: Tensor, group: Tensor) -> Tensor:
    """``[N, S]``: ``A[i,s] = R[i,s] − mean_g R[:,s]`` per phase column, no std (a lone sample keeps its raw
    reward, GRPO's rule); one segment per (group, phase), no loop over phases or groups."""
    N, S = rewards.shape
    _, inv = torch.unique(group, return_inverse=True)
    cell = (inv[:, None] * S + torch.arange(S, device=inv.device)).flatten()
    return group_norm(rewards.flatten(), cell, mode="mean").view(N, S)


def span_inputs(batch: RolloutBatch, who: str) -> tuple[Tensor, Tensor]:
    """The checked ``span_tag`` ``[N, T]`` (integer, −1..S−1) and ``span_rewards`` ``[N, S]`` (finite)."""
    tag, rewards = batch.input("span_tag"), batch.input("span_rewards")
    if tag is None or rewards is None:
        raise ValueError(f"{who} needs the inputs 'span_tag' [N, T] and 'span_rewards' [N, S] (the span_tag provider, "
                         f"from a task with tagged_spans such as slate_rank); extras: {sorted(batch.extras) or 'none'}")
    N, T = batch.mask.shape
    if tag.shape != (N, T) or tag.is_floating_point() or tag.dtype == torch.bool:
        raise ValueError(f"{who}: span_tag must be an integer [N, T] = [{N}, {T}] tensor, got {tuple(tag.shape)} "
                         f"{tag.dtype}")
    if rewards.dim() != 2 or rewards.shape[0] != N:
        raise ValueError(f"{who}: span_rewards must be [N, S] with N = {N}, got {tuple(rewards.shape)}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError(f"{who}: span_rewards holds NaN or infinite phase rewards")
    if tag.numel() and (int(tag.min()) < -1 or int(tag.max()) >= rewards.shape[1]):
        raise ValueError(f"{who}: span_tag values must lie in -1..{rewards.shape[1] - 1} (S = {rewards.shape[1]} "
                         f"phases), got {int(tag.min())}..{int(tag.max())}")
    return tag.long(), rewards


@ADVANTAGES.register("fgrpo")
class FGRPO(AdvantageEstimator):
    """``A[i,t] = Σ_s w_s · A^s_i · m^s[i,t]``, ``A^s_i = R_s,i − mean_g R_s`` (Dr. GRPO: no std).

    A response is written in S tagged phases (slate generation, then ranking); each phase has its own reward
    ``R_s`` (``span_rewards`` ``[N, S]``: slate recall, rank NDCG@k) and its own token mask ``m^s`` (``span_tag``
    ``[N, T]``: the phase of each token, tag tokens in the phase they open). Each phase's group-relative
    advantage is applied only to that phase's tokens, so a well-chosen slate followed by a poor ranking is
    credited on the slate and blamed on the ranking, which one joint reward ``R_slate + λ R_rank`` cannot do.
    ``weights`` are the w_s (F-GRPO: ``[1, λ]``, λ = 1); tokens of no phase (EOS, padding) get 0. A lone sample
    in its group keeps its raw phase rewards. Diagnostics: ``fgrpo/phase{s}_reward`` (mean R_s),
    ``fgrpo/untagged_token_frac`` and ``fgrpo/opposed_frac`` (rows whose phase advantages have opposite signs:
    where the joint reward would credit one phase with the other's result).
    """

    paper = "F-GRPO: Factorized group-relative advantages for generation and ranking (arXiv:2605.12995)"
    provenance = "SECONDARY"
    requires: ClassVar[frozenset[str]] = frozenset({"span_tag", "span_rewards"})

    weights: list[float] | None = Field(default=None)
    """Weight w_s of each phase's advantage (one per tag, finite); None: 1 for every phase."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage fgrpo"
        mask = batch.mask
        tag, rewards = span_inputs(batch, who)
        S = rewards.shape[1]
        w = torch.ones(S) if self.weights is None else torch.tensor(self.weights, dtype=torch.float64)
        if len(w) != S:
            raise ValueError(f"{who}: weights={self.weights} has {len(w)} values, the task has {S} tagged phases")
        adv = phase_advantages(rewards.to(mask.dtype), batch.group)
        weighted = adv * w.to(adv)
        tagged = tag >= 0
        token = torch.where(tagged, weighted.gather(1, tag.clamp_min(0)), 0.0) * mask
        valid = mask > 0
        diagnostics = {f"fgrpo/phase{s}_reward": float(rewards[:, s].mean()) for s in range(S)}
        diagnostics["fgrpo/untagged_token_frac"] = float((valid & ~tagged).sum() / valid.sum().clamp_min(1))
        diagnostics["fgrpo/opposed_frac"] = float(((adv > 1e-8).any(1) & (adv < -1e-8).any(1)).double().mean())
        return AdvantageResult(token, diagnostics=diagnostics)
