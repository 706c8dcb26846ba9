"""Plain REINFORCE (used with RLOO, spec §7)."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES


@POLICY_LOSSES.register("reinforce")
class Reinforce(PolicyLoss):
    """``u = −A·logp`` (on-policy score-function estimator; no ratio, no clipping)."""

    spec = "single_turn_core.md §7"
    provenance = "CODE"
    requires = frozenset()

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        return LossOutput(-batch.advantages * logp, {})
