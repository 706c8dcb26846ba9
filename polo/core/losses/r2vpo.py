"""R²VPO: ratio-variance penalty with a primal-dual multiplier instead of clipping."""
from __future__ import annotations

from typing import Any

import torch
from pydantic import Field, PrivateAttr
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean, masked_sum


@POLICY_LOSSES.register("r2vpo")
class R2VPO(PolicyLoss):
    """``u_t = −r_t·Â_t + λ·(r_t − 1)²``, so ``token_mean`` gives ``L = −masked_mean(r·Â) + λ·V̂`` with
    ``V̂ = masked_mean((r − 1)²)``; per-token gradient
    ``∂L/∂logp_t = −(1/N)·r_t·(Â_t − 2λ(r_t − 1))``.

    Dual ascent once per training step (``after_update``): ``λ ← max(0, λ + η_λ·(sg(V̂) − δ))`` where V̂ is
    the token-weighted mean of the V̂ recorded by every loss call of the step; ``dual_update: false`` keeps
    λ fixed at ``lambda_init`` (the third-party port's fixed-λ variant). λ is checkpointed via
    ``state_dict``. Stale replayed samples carry their own behaviour log-probs, so r is relative to the
    policy that generated each sample.

    A bound on the ratio's second moment about 1 is a smooth stand-in for PPO's trust region: no token's
    gradient is cut off, the update is held back only as far as the whole batch drifts. RECONSTRUCTED FROM
    ABSTRACT: the constraint and its primal-dual form are the paper's, the estimator and all defaults ours.
    """

    paper = "Ratio-Variance Regularized Policy Optimization for Efficient LLM Fine-tuning (arXiv:2601.03320)"
    provenance = "RECONSTRUCTED"

    delta: float = Field(default=0.04, ge=0)
    """Variance budget δ (0.2², PPO's ε = 0.2)."""
    lambda_init: float = Field(default=0.1, ge=0)
    lambda_lr: float = Field(default=0.1, ge=0)
    dual_update: bool = True

    _lam: float = PrivateAttr(default=None)
    _var_sum: float = PrivateAttr(default=0.0)
    _tokens: float = PrivateAttr(default=0.0)

    @property
    def lam(self) -> float:
        return self.lambda_init if self._lam is None else self._lam

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        r = ratio(logp, batch.old_logp)
        sq = (r - 1) ** 2
        self._var_sum += float(masked_sum(sq.detach(), mask))
        self._tokens += float(mask.sum())
        metrics = {"ratio_mean": masked_mean(r.detach(), mask), "ratio_variance": masked_mean(sq.detach(), mask),
                   "lambda": torch.tensor(self.lam)}
        return LossOutput(-r * batch.advantages + self.lam * sq, metrics)

    def after_update(self, batch, context) -> dict[str, float]:
        variance = self._var_sum / self._tokens if self._tokens > 0 else None
        self._var_sum, self._tokens = 0.0, 0.0
        if self.dual_update and variance is not None:
            self._lam = max(0.0, self.lam + self.lambda_lr * (variance - self.delta))
        out = {"r2vpo/lambda": self.lam}
        if variance is not None:
            out["r2vpo/ratio_variance"] = variance
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"lambda": self.lam}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._lam = float(state["lambda"])
