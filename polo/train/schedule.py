"""Learning-rate schedules as multipliers of the base rate."""
from __future__ import annotations

import math

from polo.train.config import Optim


def lr_multiplier(optim: Optim, total_steps: int):
    """``step -> factor``: linear warm-up, then constant / linear / cosine decay to ``min_lr_ratio``."""

    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, total_steps - optim.warmup_steps))
        shape = 1.0 - progress if optim.schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return optim.min_lr_ratio + (1.0 - optim.min_lr_ratio) * shape

    return factor
