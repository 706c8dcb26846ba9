"""MBA's judge multi-reward: a weighted sum of a judge's normalised per-criterion scores."""
from __future__ import annotations

import math

import torch
from pydantic import model_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.segment import group_stats, segment_sum
from polo.core.shaping.base import RewardShaping


@SHAPING.register("judge_multi")
class JudgeMulti(RewardShaping):
    """``R_i = Σ_k w_k·ŝ_ik`` with ``ŝ = (s − lo)/(hi − lo)``, from the judge role's ``judge_scores`` ``[B, D]``.

    MBA (multimodal business-ideation agents; reconstructed from the abstract, no code published) scores each
    response on D criteria (creativity and feasibility, or eight with the disclosed criteria) with a judge on a
    1–10 scale, normalises them with ``ŝ = (s − 1)/9`` and feeds the weighted sum, default ``w_k = 1/D``, to
    standard GRPO. A failed judgment (NaN) of a criterion counts as ``ŝ = 0``. ``score_range = [lo, hi]`` is
    the scale of the scores the judge role writes: its ``http`` and ``causal`` back ends already map them onto
    [0, 1] (the default here; give the http judge ``score_range: [1, 10]`` for a 1–10 rubric); set
    ``[1, 10]`` here for a judge that writes raw 1–10 scores.

    The sum can cancel: creativity [8, 5, 3] with feasibility [4, 7, 9] gives every sample the same R, so the
    group's advantage is 0 although the criteria disagree. Each step therefore logs the mean normalised score
    of every criterion (``judge_multi/<name>``) and the fraction of groups whose R is constant while some
    criterion varies (``judge_multi/cancelled_groups``).
    """

    paper = "MBA: multimodal business-ideation agents trained with GRPO on judged rewards (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"judge_scores"})

    weights: list[float] | None = None
    """``w_k``, one per judge criterion in the judge's order; None: ``1/D`` each."""
    names: list[str] | None = None
    """The criteria's names for the metrics (default ``c0, c1, …``)."""
    score_range: tuple[float, float] = (0.0, 1.0)
    """``[lo, hi]``: the judge's score scale, mapped onto [0, 1]."""

    @model_validator(mode="after")
    def _check(self) -> "JudgeMulti":
        lo, hi = self.score_range
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ValueError(f"score_range must be finite [lo, hi] with hi > lo, got {list(self.score_range)}")
        if self.weights is not None and (not self.weights or not all(math.isfinite(w) for w in self.weights)):
            raise ValueError(f"weights must be a non-empty list of finite numbers, got {self.weights}")
        if self.weights is not None and self.names is not None and len(self.names) != len(self.weights):
            raise ValueError(f"names has {len(self.names)} entries but weights has {len(self.weights)}")
        return self

    def normalised(self, batch: RolloutBatch) -> Tensor:
        """``ŝ`` ``[B, D]``, 0 where the judgment failed."""
        s = batch.input("judge_scores")
        if s is None or s.dim() != 2 or s.shape[0] != batch.batch_size:
            raise ValueError(f"shaping judge_multi: input 'judge_scores' must have shape [B, D] with B = "
                             f"{batch.batch_size}, got {None if s is None else list(s.shape)}")
        D = s.shape[1]
        if D == 0:
            raise ValueError("shaping judge_multi: input 'judge_scores' has no criteria")
        for field, given in (("weights", self.weights), ("names", self.names)):
            if given is not None and len(given) != D:
                raise ValueError(f"shaping judge_multi: {field} has {len(given)} entries but the judge scores "
                                 f"{D} criteria (roles.judge.criteria)")
        lo, hi = self.score_range
        return torch.where(s.isfinite(), (s - lo) / (hi - lo), torch.zeros_like(s))

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        s = self.normalised(batch)
        D = s.shape[1]
        w = s.new_tensor(self.weights) if self.weights is not None else s.new_full((D,), 1.0 / D)
        return s @ w

    def present(self, batch: RolloutBatch) -> Tensor:
        """The rows judged on every criterion."""
        return batch.input("judge_scores").isfinite().all(-1)

    def after_update(self, batch, context) -> dict[str, float]:
        s = self.normalised(batch)
        names = self.names or [f"c{k}" for k in range(s.shape[1])]
        judged = batch.input("judge_scores").isfinite()
        means = (s * judged).sum(0) / judged.sum(0).clamp_min(1)
        row = {f"judge_multi/{name}": float(m) for name, m in zip(names, means)}
        flat = group_stats(self(batch, 0), batch.group)[1] < 1e-6
        varied = torch.stack([group_stats(col, batch.group)[1] for col in s.T], 1).gt(1e-6).any(1)
        _, group = torch.unique(batch.group, return_inverse=True)
        size = segment_sum(torch.ones_like(flat, dtype=s.dtype), group)
        cancelled = segment_sum((flat & varied).to(s.dtype), group) / size  # 0 or 1 per group
        row["judge_multi/cancelled_groups"] = float(cancelled[size > 1].mean()) if bool((size > 1).any()) else 0.0
        return row
