"""The judge's score as a reward component."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.shaping.base import RewardShaping


@SHAPING.register("judge")
class JudgeReward(RewardShaping):
    """``R_judge = s`` where the judge scored the row (``judge_score`` ``[B]``, the mean of its criteria), 0 where
    its judgment failed (NaN: timeout, unparseable reply, ...; ``present`` is False there). The judge role's back end sets the scale: a
    verdict probability or an endpoint's score mapped onto [0, 1], or a reward model's unbounded score (so the
    component declares no finite maximum). Weighted by ``weight`` in the scalar reward like every component.
    """

    provenance = "CODE"
    requires = frozenset({"judge_score"})

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        score = batch.input("judge_score")
        if score is None or score.shape != (batch.batch_size,):
            raise ValueError(f"shaping judge: input 'judge_score' must have shape [B] = [{batch.batch_size}], got "
                             f"{None if score is None else list(score.shape)}")
        return torch.where(score.isfinite(), score, torch.zeros_like(score))

    def present(self, batch: RolloutBatch) -> Tensor:
        """The rows the judge scored: per-reward metrics average only those."""
        return batch.input("judge_score").isfinite()
