"""Reward shaping: a batch → one more reward component ``[B]``, appended to ``rewards[B,K]`` under the
component's registry name with weight ``weight``."""
from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import Component


class RewardShaping(Component):
    weight: float = 1.0
    max_value: ClassVar[float] = math.inf
    """The largest value the shaping term takes (the appended component's ``reward_max``)."""

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        raise NotImplementedError

    def present(self, batch: RolloutBatch) -> Tensor:
        """``[B]`` bool: the rows the term scored (its ``reward_present`` column); every row by default."""
        return torch.ones(batch.batch_size, dtype=torch.bool)
