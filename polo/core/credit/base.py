"""Token credit: ``weights[B,T]`` that multiply the advantages after estimation (``adv ← adv · w``)."""
from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import Component


class TokenCredit(Component):
    """Batch (with ``advantages`` set) → detached weights ``[B,T]``, 0 where ``response_mask == 0``."""

    corrects_stale_samples: ClassVar[bool] = False
    """True when the weights correct samples drawn by an older policy (importance ratios against the behaviour
    log-probs): what asynchronous RL (``train.async_staleness``) requires."""

    def __call__(self, batch: RolloutBatch) -> Tensor:
        raise NotImplementedError

    def diagnostics(self, batch: RolloutBatch, weights: Tensor) -> dict[str, float]:
        """Logged each step: mean, min and max of the weights over the trained tokens, and the fraction set to 0."""
        m = batch.mask.bool()
        if not m.any():
            return {}
        w = weights[m].float()
        return {"credit/mean": float(w.mean()), "credit/min": float(w.min()), "credit/max": float(w.max()),
                "credit/zero_frac": float((w == 0).float().mean())}
