"""Optimizer hooks (stage ``Optimizer``): a learning-rate multiplier computed from the step's gradients."""
from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr
from torch import Tensor

from polo.core.registry import OPTIMIZER_HOOKS, Component


class OptimizerHook(Component):
    """``lr_factor(grads)`` with ``grads`` ``[K, P]``: K independent flattened gradient estimates of one
    optimizer step (per micro-batch or per rank, before averaging). The trainer multiplies the scheduled
    learning rate by the returned factor for that step; when the recipe sets no micro-batch size it splits
    each minibatch into ``estimates`` micro-batches to get them."""

    estimates: int = Field(default=4, ge=2)

    def lr_factor(self, grads: Tensor) -> float:
        raise NotImplementedError


def gradient_snr(grads: Tensor) -> tuple[float, float]:
    """``(signal, noise)`` of K gradient estimates: ``ḡ = mean_k g_k``,
    ``s² = (Σ_k ‖g_k‖² − K‖ḡ‖²)/(K − 1)``, ``noise = s²/K``, ``signal = max(‖ḡ‖² − noise, 0)``."""
    g = grads.detach().double().flatten(1)
    k = g.shape[0]
    mean_sq = float(g.mean(0).square().sum())
    noise = max(float(g.square().sum()) - k * mean_sq, 0.0) / (k - 1) / k
    return max(mean_sq - noise, 0.0), noise


@OPTIMIZER_HOOKS.register("snr_lr")
class SNRLearningRate(OptimizerHook):
    """OBLR-PO's SNR schedule: ``SNR = signal/noise`` (``gradient_snr``), ``f = clamp(SNR/(1+SNR), f_min, 1)``,
    smoothed ``f_t = ema·f_{t−1} + (1 − ema)·f`` (the first step uses f), ``η_t = η·f_t``.

    noise = 0 gives f = 1 (f_min if the gradient is 0 too); with K < 2 no noise can be estimated and the
    smoothed factor is returned unchanged (1 before any estimate). RECONSTRUCTED FROM ABSTRACT: the paper ties
    the step size to the gradient's signal-to-noise ratio; the SNR/(1 + SNR) map, the floor and the smoothing
    are our choices.
    """

    paper = "OBLR-PO: A Theoretical Framework for Stable Reinforcement Learning (arXiv:2511.23310)"
    provenance = "RECONSTRUCTED"

    f_min: float = Field(default=0.1, gt=0, le=1)
    ema: float = Field(default=0.9, ge=0, lt=1)

    _factor: float | None = PrivateAttr(default=None)
    _snr: float = PrivateAttr(default=float("nan"))

    def lr_factor(self, grads: Tensor) -> float:
        if grads.shape[0] < 2:
            return 1.0 if self._factor is None else self._factor
        signal, noise = gradient_snr(grads)
        self._snr = signal / noise if noise > 0 else (float("inf") if signal > 0 else 0.0)
        raw = 1.0 if self._snr == float("inf") else self._snr / (1 + self._snr)
        raw = min(max(raw, self.f_min), 1.0)
        self._factor = raw if self._factor is None else self.ema * self._factor + (1 - self.ema) * raw
        return self._factor

    def after_update(self, batch, context) -> dict[str, float]:
        return {} if self._factor is None else {"snr_lr/factor": self._factor, "snr_lr/snr": self._snr}

    def state_dict(self) -> dict[str, Any]:
        return {} if self._factor is None else {"factor": self._factor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._factor = state.get("factor")

