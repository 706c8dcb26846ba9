"""Token credit: ``weights[B,T]`` that multiply the advantages after estimation (``adv ← adv · w``)."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import Component


class TokenCredit(Component):
    """Batch (with ``advantages`` set) → detached weights ``[B,T]``, 0 where ``response_mask == 0``."""

    def __call__(self, batch: RolloutBatch) -> Tensor:
        raise NotImplementedError
