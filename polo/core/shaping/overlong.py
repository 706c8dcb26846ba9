"""DAPO soft overlong penalty."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.shaping.base import RewardShaping


@SHAPING.register("overlong")
class Overlong(RewardShaping):
    """``R_len = min(0, −(L − (L_max − L_buf))/L_buf·c)``: 0 up to ``L_max − L_buf``, falling linearly to −c at
    ``L_max`` (L = trained response tokens). ``max_length`` None → the trainer's ``max_new_tokens``;
    ``buffer`` None → ``L_max // 5`` (FeynRL's short-budget choice; DAPO used 4096 of 20480), at least 1.
    A truncated response gets a reward that says nothing about its reasoning; the soft penalty tells the
    policy about length before the hard cut-off. Source: verl ``verl/workers/reward_manager/dapo.py``.
    """

    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"
    provenance = "CODE"
    max_value = 0.0

    max_length: int | None = Field(default=None, gt=0)
    buffer: int | None = Field(default=None, gt=0)
    factor: float = Field(default=1.0, ge=0)

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        l_max = self.max_length or max_new_tokens
        l_buf = min(self.buffer or max(l_max // 5, 1), l_max)
        length = batch.lengths.to(batch.rewards.dtype if batch.rewards.is_floating_point() else torch.float32)
        return (-(length - (l_max - l_buf)) / l_buf * self.factor).clamp(max=0)
