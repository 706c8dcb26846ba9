"""Plain REINFORCE (the loss RLOO trains with)."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES


@POLICY_LOSSES.register("reinforce")
class Reinforce(PolicyLoss):
    """``u = −A·logp`` (on-policy score-function estimator; no ratio, no clipping): its gradient is
    ``−A·∇logp``, the likelihood-ratio policy gradient with the baseline already inside A."""

    paper = ("Simple Statistical Gradient-Following Algorithms for Connectionist Reinforcement Learning "
             "(R. J. Williams, Machine Learning 8, 1992; predates arXiv, no arXiv id)")
    provenance = "CODE"
    requires = frozenset()

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        return LossOutput(-batch.advantages * logp, {})
