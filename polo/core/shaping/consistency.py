"""Con-GRPO's consistency term with a model judge: does the reasoning support the answer it gives?"""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.shaping.base import RewardShaping


@SHAPING.register("consistency_judge")
class ConsistencyJudge(RewardShaping):
    """``r_con·r_fmt``: Con-GRPO's consistency reward, given only to well-formed responses.

    MedAD-R1 (arXiv:2602.01081) rewards ``r = r_acc + r_fmt + λ_con·r_con·r_fmt``; ``λ_con`` is this term's
    ``weight``. ``r_fmt`` is the reward component ``format_reward`` (1 for ``<think>c</think><answer>a</answer>``)
    and ``r_con`` comes from the ``judge`` role's ``judge_score`` ``[B]``, the judge's probability that the
    reasoning ``c`` concludes the answer ``a`` (a yes/no verdict template over the response): ``soft`` mode uses
    that probability, ``binary`` mode ``1[p ≥ 0.5]`` (the paper's judge names the conclusion; a verdict at
    temperature 0 is its binary form). A failed judgment (NaN) of a well-formed row scores 0 and is not
    ``present``. Reconstructed from the abstract; the rule judge for numeric answers is the reward
    ``think_consistency`` (no model).
    """

    paper = "MedAD-R1, Con-GRPO (arXiv:2602.01081)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"judge_score"})
    max_value = 1.0

    mode: Literal["binary", "soft"] = "binary"
    """``binary``: ``r_con = 1[judge_score ≥ 0.5]``; ``soft``: ``r_con = judge_score`` (clipped to [0, 1])."""
    format_reward: str = "think_answer_format"
    """The reward component holding ``r_fmt`` (1 for a well-formed response, else 0)."""

    def formatted(self, batch: RolloutBatch) -> Tensor:
        return batch.reward_column(self.format_reward) > 0

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        p = batch.input("judge_score")
        if p is None or p.shape != (batch.batch_size,):
            raise ValueError(f"shaping consistency_judge: input 'judge_score' must have shape [B] = "
                             f"[{batch.batch_size}], got {None if p is None else list(p.shape)}")
        con = (p >= 0.5).to(p.dtype) if self.mode == "binary" else p.clamp(0.0, 1.0)
        return torch.where(self.formatted(batch) & p.isfinite(), con, torch.zeros_like(p))

    def present(self, batch: RolloutBatch) -> Tensor:
        """Malformed rows (0 by definition) and well-formed rows the judge scored."""
        return ~self.formatted(batch) | batch.input("judge_score").isfinite()
