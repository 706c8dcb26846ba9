"""SAPO: soft adaptive policy optimization, a sigmoid gate in place of the hard clip."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("sapo")
class SAPO(PolicyLoss):
    """``u_t = −A_t·f(r_t; τ_t)``, ``f(r; τ) = (4/τ)·σ(τ·(r − 1))``, ``τ_t = τ_pos`` if A_t > 0 else
    ``τ_neg``.

    ``∂f/∂logp = 4·σ'(τ(r−1))·r`` equals r at r = 1 (the on-policy gradient −A) and decays smoothly as the
    ratio drifts: a continuous trust region instead of PPO's cut-off. Use ``seq_mean_token_mean``.
    Formula and defaults (τ_pos = 1.0, τ_neg = 1.05) read from verl
    ``verl/trainer/ppo/core_algos.py::compute_policy_loss_sapo`` and TRL ``GRPOConfig.sapo_temperature_*``.
    """

    paper = "Soft Adaptive Policy Optimization (arXiv:2511.20347)"

    provenance = "CODE"

    tau_pos: float = Field(default=1.0, gt=0)
    tau_neg: float = Field(default=1.05, gt=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        r = ratio(logp, batch.old_logp)
        tau = torch.where(adv > 0, torch.full_like(r, self.tau_pos), torch.full_like(r, self.tau_neg))
        gate = torch.sigmoid(tau * (r - 1)) * (4 / tau)
        return LossOutput(-adv * gate, {"ratio_mean": masked_mean(r.detach(), mask),
                                        "gate_mean": masked_mean(gate.detach(), mask)})
