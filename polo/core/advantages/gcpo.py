"""GCPO: GRPO on a reward whose bonus for an optional behaviour takes its sign from a per-group contrast."""
from __future__ import annotations

import re

import torch
from pydantic import Field, field_validator
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats_where, segment_sum

TAG_PATTERN = r"<auxiliary>.*?</auxiliary>"
"""The paper's auxiliary-construction block, GCPO's default tag."""


@ADVANTAGES.register("gcpo")
class GCPO(AdvantageEstimator):
    """GRPO's ``A = (R − mean_g R)/(std_g R + ε)`` of
    ``R = w_acc·c + w_fmt·f + w_tag·M·t + w_len·min(L, L_max)/L_max`` (correctness c, format f, tag use
    t ∈ {0,1}, L response tokens), where each group's tag sign M is +1 if ``Δ > η``, −1 if ``Δ < −η``, else 0,
    with ``Δ = mean_U c − mean_N c`` over the rows that use the tag (U = {t = 1}) and those that do not
    (N = {t = 0}); M = 0 when U or N is empty.

    The std is unbiased; a lone sample keeps ``A = R``. ``r_tag = w_tag·M·t`` and ``r_len`` can each be
    gated on a correct answer (``gate_tag_on_correct``, ``gate_len_on_correct``: 0 where ``c = 0``).

    The tag pays off only in groups where using it goes with more correct answers, and costs where it goes
    with fewer, so the policy learns when the behaviour helps instead of using it everywhere.
    ``c`` and ``f`` are reward components of the batch named by ``accuracy_reward`` and ``format_reward``
    (unweighted: GCPO's own weights apply); ``t`` is the input ``tag_used``, 1 where the completion matches
    ``tag_pattern``. A row where ``c`` or ``f`` is missing (a reward returned None) is unscored: A = 0, it is
    left out of the contrast and the group statistics, and out of the loss (``keep``).
    """

    paper = ("GeometryZero: Improving Geometry Solving for LLM with Group Contrastive Policy Optimization "
             "(arXiv:2506.07160)")
    provenance = "RECONSTRUCTED"
    requires = frozenset({"tag_used"})

    accuracy_reward: str = "correct"
    """Reward component read as the correctness c."""
    format_reward: str | None = "format"
    """Reward component read as the format score f; None: no format term (f = 0)."""
    tag_pattern: str = TAG_PATTERN
    """Regular expression marking the optional behaviour in a completion (the ``tag_used`` input)."""
    eta: float = Field(default=0.05, ge=0)
    """Margin η: the tag's sign is set only when the two subsets' accuracies differ by more."""
    w_acc: float = 1.0
    """Weight of the correctness c."""
    w_fmt: float = 0.5
    """Weight of the format score f."""
    w_tag: float = 0.5
    """Size of the tag bonus (+w_tag or −w_tag on the rows that use the tag)."""
    w_len: float = 0.5
    """Weight of the capped length bonus."""
    l_max: int = Field(default=900, gt=0)
    """Response length (tokens) at which the length bonus stops growing."""
    gate_tag_on_correct: bool = False
    """Pay the tag bonus only on correct rows (c ≠ 0)."""
    gate_len_on_correct: bool = False
    """Pay the length bonus only on correct rows (c ≠ 0)."""
    eps: float = Field(default=1e-6, gt=0)
    """ε added to the group's std."""

    @field_validator("tag_pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as err:
            raise ValueError(f"not a regular expression: {err}") from None
        return pattern

    def rewards(self, batch: RolloutBatch) -> tuple[Tensor, Tensor, Tensor]:
        """``(R, M per row, valid)`` each ``[B]``."""
        mask = batch.mask
        c = batch.reward_column(self.accuracy_reward).to(mask)
        f = torch.zeros_like(c) if self.format_reward is None else batch.reward_column(self.format_reward).to(mask)
        t = batch.input("tag_used")
        if t is None or t.shape != c.shape:
            raise ValueError(f"gcpo: input 'tag_used' must have shape [B] = [{len(c)}], got "
                             f"{None if t is None else list(t.shape)}")
        t = t.to(mask)
        valid = c.isfinite() & f.isfinite()
        c, f, scored = c.nan_to_num(0.0), f.nan_to_num(0.0), valid.to(mask)
        inv = torch.unique(batch.group, return_inverse=True)[1]
        in_u, in_n = t * scored, (1 - t) * scored  # rows of U and of N
        used, unused = segment_sum(in_u, inv), segment_sum(in_n, inv)
        delta = segment_sum(c * in_u, inv) / used.clamp_min(1) - segment_sum(c * in_n, inv) / unused.clamp_min(1)
        sign = torch.where(delta > self.eta, 1.0, torch.where(delta < -self.eta, -1.0, 0.0))
        contrast = torch.where((used > 0) & (unused > 0), sign, 0.0)[inv]
        correct = (c != 0).to(mask)
        r_tag = self.w_tag * contrast * t * (correct if self.gate_tag_on_correct else 1.0)
        r_len = self.w_len * batch.lengths.to(mask).clamp(max=self.l_max) / self.l_max
        r_len = r_len * (correct if self.gate_len_on_correct else 1.0)
        return self.w_acc * c + self.w_fmt * f + r_tag + r_len, contrast, valid

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward, contrast, valid = self.rewards(batch)
        mean, std, _ = group_stats_where(reward, batch.group, valid)
        adv = torch.where(valid, (reward - mean) / (std + self.eps), 0.0)
        t = batch.input("tag_used").to(mask)
        diagnostics = {"gcpo/tag_rate": float(t.mean()) if len(t) else 0.0,
                       "gcpo/tag_bonus_rows": float(((contrast > 0) & (t > 0)).sum()),
                       "gcpo/tag_penalty_rows": float(((contrast < 0) & (t > 0)).sum()),
                       "gcpo/unscored": float((~valid).sum())}
        return AdvantageResult(adv[:, None] * mask, keep=None if bool(valid.all()) else valid,
                               diagnostics=diagnostics)
