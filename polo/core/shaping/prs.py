"""PRS, progressive reward shaping: format first, then answer quality; the long-form (judged) stage."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.shaping.base import RewardShaping

PAPER = "Value-based Sampling Policy Optimization and Progressive Reward Shaping (arXiv:2512.07478)"


def progressive_reward(f: Tensor, q: Tensor) -> Tensor:
    """``R = −1 + f`` while the format stage is incomplete (``f < 1``), else ``R = q``.

    ``f ∈ [0, 1]`` is the format score (well-formed tool calls, answer tag present) and ``q ∈ [0, 1]`` the answer
    quality: a response earns quality only once its format is complete, and any complete response
    (R ≥ 0) outranks every incomplete one (R < 0). Elementwise; NaN is refused.
    """
    if not bool(torch.isfinite(f).all() & torch.isfinite(q).all()):
        raise ValueError("progressive_reward: f and q must be finite")
    return torch.where(f < 1, f - 1, q)


@SHAPING.register("prs_judge")
class PRSJudge(RewardShaping):
    """PRS's quality stage for long-form answers, judged: ``q = judge_score / max_score`` (clipped to [0, 1]) on
    the rows whose format is complete, 0 elsewhere.

    It completes the format stage scored by the engine: the reward ``format_reward`` (default ``prs_format``,
    ``f − 1``: 0 exactly when the format is complete) gives ``−1 + f``, this term adds ``1[f = 1]·q``, so with
    both at weight 1 the total is PRS's ``R = −1 + f if f < 1 else q``. A failed judgment (NaN) of a complete
    row scores 0 and is not ``present`` (per-reward metrics leave it out).
    """

    paper = PAPER
    provenance = "RECONSTRUCTED"
    requires = frozenset({"judge_score"})
    max_value = 1.0

    format_reward: str = "prs_format"
    """The reward component holding ``f − 1`` (0 iff the format is complete)."""
    max_score: float = Field(1.0, gt=0.0)
    """The judge's largest score (1 for a verdict probability)."""

    def complete(self, batch: RolloutBatch) -> Tensor:
        return batch.reward_column(self.format_reward) == 0

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        score = batch.input("judge_score")
        if score is None or score.shape != (batch.batch_size,):
            raise ValueError(f"shaping prs_judge: input 'judge_score' must have shape [B] = [{batch.batch_size}], "
                             f"got {None if score is None else list(score.shape)}")
        q = (score / self.max_score).clamp(0.0, 1.0)
        return torch.where(self.complete(batch) & score.isfinite(), q, torch.zeros_like(q))

    def present(self, batch: RolloutBatch) -> Tensor:
        """Incomplete rows (their term is 0 by definition) and complete rows the judge scored."""
        return ~self.complete(batch) | batch.input("judge_score").isfinite()
