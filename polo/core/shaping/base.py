"""Reward shaping: a batch → one more reward component ``[B]``, appended to ``rewards[B,K]`` under the
component's registry name with weight ``weight``."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import Component


class RewardShaping(Component):
    weight: float = 1.0

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        raise NotImplementedError
