"""What the trainer tells stateful components after each update (``Component.after_update``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor

from polo.core.batch import RolloutBatch


@dataclass
class StepContext:
    step: int
    """Number of completed training steps, this one included."""
    policy_logp: Callable[[RolloutBatch], Tensor]
    """No-grad ``[B,T]`` log-probs of a batch's responses under the current (just updated) policy."""
    lr: float
