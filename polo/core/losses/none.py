"""No policy-gradient term: training comes from the regularizers alone (pure on-policy distillation)."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES


@POLICY_LOSSES.register("none")
class NoPolicyLoss(PolicyLoss):
    """``u = 0`` on every token (kept on the autograd graph as ``0·logp``, so a step with nothing else to
    learn is a zero gradient, not an error): the advantages are ignored and the step is whatever the
    ``regularizers`` give, e.g. GKD's distillation on the student's own samples, "On-Policy Distillation of
    Language Models: Learning from Self-Generated Mistakes" (arXiv:2306.13649)."""

    paper = "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes (arXiv:2306.13649)"
    provenance = "CODE"
    requires = frozenset()
    inert_at_zero_advantage = True

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        return LossOutput(logp * 0.0, {})
