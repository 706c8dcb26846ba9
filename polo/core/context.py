"""What the trainer tells stateful components: once before training (``Component.before_training``) and
after each update (``Component.after_update``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor

from polo.core.batch import RolloutBatch


@dataclass
class TrainingContext:
    pool_index: Tensor
    """``[N]`` indices of the training pool's prompts (the values of ``extras["prompt_index"]``)."""
    rollout: Callable[[Tensor, int], RolloutBatch]
    """``rollout(prompt_index, samples_per_prompt)``: a scored batch of the current policy on those prompts
    (consecutive rows form a group; ``extras`` holds ``correct`` and ``prompt_index``)."""


@dataclass
class StepContext:
    step: int
    """Number of completed training steps, this one included."""
    policy_logp: Callable[[RolloutBatch], Tensor]
    """No-grad ``[B,T]`` log-probs of a batch's responses under the current (just updated) policy."""
    lr: float
