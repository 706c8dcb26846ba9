"""RGPO's imitation term on kept guided answers. "Rationale-Guided Policy Optimization" (arXiv:2610.07342)."""
from __future__ import annotations

from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput
from polo.core.registry import REGULARIZERS
from polo.core.regularizers.base import Regularizer
from polo.core.segment import masked_mean


@REGULARIZERS.register("guided_nll")
class GuidedNLL(Regularizer):
    """``coef · (−Σ log π_θ(y_t | x, y_<t)) / n`` over the tokens of the rows the ``guided`` engine replaced
    (``extras["guided"]``): answers found with a hint, trained under the hint-free prompt ``x``. RGPO's README
    weighs kept answers by 0.001 (``coef``); the average over their tokens (rather than per answer, then over
    answers) is our choice."""

    paper = "Rationale-Guided Policy Optimization (arXiv:2610.07342)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"guided"})

    coef: float = 0.001

    def scope(self, batch: RolloutBatch) -> Tensor:
        return batch.mask * batch.extras["guided"].to(batch.mask)[:, None]

    def __call__(self, logp: Tensor, batch: RolloutBatch, logprobs: Tensor | None = None) -> LossOutput:
        scope = self.scope(batch)
        return LossOutput(-logp, {"guided_tokens": scope.sum(), "nll": masked_mean(-logp.detach(), scope)})
