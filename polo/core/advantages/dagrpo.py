"""DaGRPO: GRPO read as a sum of pairwise comparisons, keeping only the pairs whose scores are distinct."""
from __future__ import annotations

import torch
from pydantic import Field, field_validator
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import equal_groups, group_stats_where, segment_sum

REWARD_PREFIX = "reward:"
TIE_TOLERANCE = 1e-6
"""Gaps within float rounding of ``delta`` count as distinct: scores on a 0.1 grid give gaps like 0.3 − 0.2 =
0.09999999999999998 that mean exactly ``delta = 0.1``."""


@ADVANTAGES.register("dagrpo")
class DaGRPO(AdvantageEstimator):
    """``A_i = Σ_{j≠i} m_ij (s_i − s_j) / ((G − 1)(σ_s + ε))`` with ``m_ij = 1[|s_i − s_j| ≥ δ]``: GRPO as
    a sum of pairwise comparisons inside a group of G rollouts with fine-grained scores ``s`` (e.g. a judge's
    score in [0, 1]), keeping only the pairs whose scores differ by at least δ (``delta``, less
    ``TIE_TOLERANCE``), so near-identical rollouts are not pushed apart; σ_s is the group's unbiased std of s.

    With every pair kept this is ``G/(G−1)·(s_i − mean s)/σ_s``, GRPO's z-score up to the constant G/(G−1).
    Anchor rows (``extras["anchor"]`` = 1: an expert solution the engine put in place of the lowest-scored
    rollout of a group that had no correct one) get ``s = 1`` and count as correct. A row whose score is not
    finite (NaN: a failed judge call, or a reward that returned None) takes no part in its group: A = 0, it is
    left out of the pairs, of σ_s and of G (which counts the scored rows), and out of the loss (``keep``).
    Groups must all have the same size G ≥ 2; a group with fewer than 2 scored rows has no pairs and A = 0.

    The score comes from ``score``: an input name (``judge_score``, the judge role's ``[B]`` score) or
    ``reward:NAME``, reward component ``NAME`` of the batch (e.g. ``reward:digit_match``, partial credit with
    correctness folded in; ``reward:tests_passed`` on the code task).
    """

    paper = ("DaGRPO: Rectifying Gradient Conflict in Reasoning via Distinctiveness-Aware Group Relative "
             "Policy Optimization (arXiv:2512.06337)")
    provenance = "RECONSTRUCTED"
    requires = frozenset({"correct"})

    score: str = "judge_score"
    """Where the fine-grained score s comes from: an input name, or ``reward:NAME`` for reward component NAME."""
    delta: float = Field(default=0.1, ge=0)
    """Distinctiveness threshold δ: pairs whose scores differ by less are masked out."""
    eps: float = Field(default=1e-6, gt=0)
    """ε added to the group's std."""
    anchors: bool = True
    """Read the anchor rows an engine injected (``extras["anchor"]``, written by the ``guided`` engine); False:
    no anchors (any engine)."""

    @field_validator("score")
    @classmethod
    def _score_source(cls, score: str) -> str:
        if not score or score == REWARD_PREFIX:
            raise ValueError(f"expected an input name or 'reward:NAME', got {score!r}")
        return score

    def needs(self) -> set[str]:
        score = set() if self.score.startswith(REWARD_PREFIX) else {self.score}
        return score | set(self.requires) | ({"anchor"} if self.anchors else set())

    def scores(self, batch: RolloutBatch) -> Tensor:
        """``s`` ``[B]``: the configured score, 1 on anchor rows."""
        if self.score.startswith(REWARD_PREFIX):
            s = batch.reward_column(self.score[len(REWARD_PREFIX):])
        else:
            s = batch.input(self.score)
            if s is None:
                raise ValueError(f"dagrpo: the batch has no input {self.score!r} (advantage.score)")
        if s.shape != (batch.batch_size,):
            raise ValueError(f"dagrpo: score {self.score!r} must have shape [B] = [{batch.batch_size}], "
                             f"got {list(s.shape)}")
        s = s.to(batch.mask)
        return torch.where(self.anchor_rows(batch).to(s.device), 1.0, s)

    def anchor_rows(self, batch: RolloutBatch) -> Tensor:
        """``[B]`` bool: the anchor rows (none when ``anchors`` is off)."""
        if not self.anchors:
            return torch.zeros(batch.batch_size, dtype=torch.bool)
        return batch.extras["anchor"].bool().cpu()

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        s = self.scores(batch)
        valid = s.isfinite()
        try:
            idx = equal_groups(batch.group)
        except ValueError as err:
            raise ValueError(f"dagrpo compares the rollouts of a group pairwise in [groups, G, G] blocks: {err}"
                             ) from None
        if idx.shape[1] < 2 and len(idx):
            raise ValueError(f"dagrpo needs at least 2 rollouts per group to compare, got {idx.shape[1]}: "
                             f"raise rollout.samples_per_prompt")
        _, std, count = group_stats_where(s, batch.group, valid)  # over each group's scored rows

        block = s.nan_to_num(0.0)[idx]  # [n, G]
        ok = valid[idx]
        diff = block[:, :, None] - block[:, None, :]  # [n, G, G]: s_i − s_j
        pair = ok[:, :, None] & ok[:, None, :] & ~torch.eye(idx.shape[1], dtype=torch.bool, device=s.device)
        kept = pair & (diff.abs() >= self.delta - TIE_TOLERANCE)
        summed = torch.zeros_like(s)
        summed[idx] = (kept * diff).sum(-1)
        adv = torch.where(valid, summed / ((count - 1).clamp_min(1) * (std + self.eps)), 0.0)
        return AdvantageResult(adv[:, None] * mask, keep=None if bool(valid.all()) else valid,
                               diagnostics=self.diagnostics(batch, pair, kept, valid))

    def diagnostics(self, batch: RolloutBatch, pair: Tensor, kept: Tensor, valid: Tensor) -> dict[str, float]:
        """Fraction of compared pairs masked out, anchor rows, unscored rows and groups without a correct
        rollout (``extras["correct"]``, anchors counted correct)."""
        pairs = int(pair.sum())
        out = {"dagrpo/masked_pair_frac": 1.0 - int(kept.sum()) / pairs if pairs else 0.0,
               "dagrpo/unscored": float((~valid).sum())}
        anchor = self.anchor_rows(batch)
        out["dagrpo/anchors"] = float(anchor.sum())
        correct = (batch.extras["correct"].bool().cpu() | anchor).float()
        solved = segment_sum(correct, torch.unique(batch.group.cpu(), return_inverse=True)[1])
        out["dagrpo/groups_without_correct"] = float((solved == 0).sum())
        return out
