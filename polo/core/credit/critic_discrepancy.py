"""ReDiPPO's discrepancy weights: up-weight tokens where the two critics disagree."""
from __future__ import annotations

from pydantic import model_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.credit.base import TokenCredit
from polo.core.registry import CREDIT, Component
from polo.core.segment import masked_mean


def discrepancy_weights(v_ref: Tensor, v_std: Tensor, mask: Tensor, w_min: float, w_max: float, eps: float) -> Tensor:
    """``e = |v_ref − v_std|``; μ_e, σ_e = population mean / std of e over all valid tokens;
    ``w = clamp(1 + (e − μ_e)/(σ_e + eps), w_min, w_max)``, 0 where masked."""
    e = (v_ref - v_std).abs()
    mu = masked_mean(e, mask)
    sigma = masked_mean((e - mu) ** 2, mask).sqrt()
    return (1 + (e - mu) / (sigma + eps)).clamp(w_min, w_max) * mask


class DiscrepancyWeighting(Component):
    """Hyperparameters of ``discrepancy_weights`` (0 < w_min ≤ 1 ≤ w_max) and their application to a batch:
    ``values_privileged`` is the reference-guided critic v_ref, ``values`` the standard critic v_std."""

    w_min: float = 0.5
    w_max: float = 2.0
    eps_e: float = 1e-6

    @model_validator(mode="after")
    def _bounds(self):
        if not 0 < self.w_min <= 1 <= self.w_max:
            raise ValueError(f"need 0 < w_min <= 1 <= w_max, got w_min={self.w_min}, w_max={self.w_max}")
        return self

    def discrepancy(self, batch: RolloutBatch) -> Tensor:
        mask = batch.mask
        v_ref, v_std = batch.extras["values_privileged"].to(mask), batch.values.to(mask)
        return discrepancy_weights(v_ref, v_std, mask, self.w_min, self.w_max, self.eps_e).detach()


@CREDIT.register("critic_discrepancy")
class CriticDiscrepancy(TokenCredit, DiscrepancyWeighting):
    """Token credit ``w = discrepancy_weights(values_privileged, values)``, multiplied into any advantage.
    (The ``redippo`` advantage applies the same weights itself, before its whitening, as the paper does.)

    A large gap between the critic that saw the reference answer and the one that did not marks a state the
    standard critic misjudges, i.e. a hard reasoning step; its advantage is amplified. SECONDARY: read from a
    detailed third-party summary of the paper's method; ε_e = 1e-6 is our default."""

    paper = ("ReDiPPO: Reference-Guided Value Calibration and Discrepancy-Aware Token Reweighting for "
             "Mathematical Reasoning (arXiv:2607.27631)")
    provenance = "SECONDARY"
    requires = frozenset({"values", "values_privileged"})

    def __call__(self, batch: RolloutBatch) -> Tensor:
        return self.discrepancy(batch)
