"""GPG: group policy gradient, plain REINFORCE rescaled for the samples that carry no signal."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import group_stats


@POLICY_LOSSES.register("gpg")
class GPG(PolicyLoss):
    """``u_t = −α·A_t·logp_t`` with ``α = B / (B − M)``: B rows, M rows whose group's rewards are all equal
    (zero gradient, they only dilute the mean); ``alpha_correction: false`` gives α = 1. No ratio, no clip,
    no KL. Pair with ``dr_grpo`` advantages (F_norm = 1) and ``token_mean``.
    Loss read from verl ``verl/trainer/ppo/core_algos.py::compute_policy_loss_gpg`` (verl puts α in its
    ``gpg`` advantage). α is computed over the rows the loss sees (the micro-batch when the trainer splits one).
    """

    paper = "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning (arXiv:2504.02546)"

    provenance = "CODE"
    requires = frozenset()

    alpha_correction: bool = True

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        alpha = torch.ones((), dtype=logp.dtype, device=logp.device)
        if self.alpha_correction:
            _, std, count = group_stats(batch.scalar_reward().to(logp), batch.group)
            silent = ((std == 0) & (count > 1)).sum()
            alpha = batch.batch_size / (batch.batch_size - silent).clamp_min(1).to(logp)
        return LossOutput(-alpha * batch.advantages * logp, {"gpg_alpha": alpha.detach()})
