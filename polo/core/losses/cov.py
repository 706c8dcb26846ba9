"""Clip-Cov and KL-Cov: restrain the few tokens whose advantage–log-prob covariance drives entropy collapse."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


def centered_covariance(adv: Tensor, logp: Tensor, mask: Tensor) -> Tensor:
    """Per-token ``(A − mean A)·(logp − mean logp)`` with means over the valid tokens (detached)."""
    logp = logp.detach()
    return (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))


def _pick(keys: Tensor, candidates: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` candidates with the largest ``keys`` (fewer if there are fewer candidates)."""
    k = min(k, int(candidates.sum()))
    picked = torch.zeros(keys.numel(), dtype=torch.bool, device=keys.device)
    picked[keys.masked_fill(~candidates, -torch.inf).flatten().topk(k).indices] = True
    return picked.view_as(keys)


@POLICY_LOSSES.register("clip_cov")
class ClipCov(PolicyLoss):
    """PPO clip, plus: among the unclipped valid tokens with covariance
    ``cov_t = (A_t − Ā)(logp_t − sg(mean logp))`` in ``(cov_lb, cov_ub)``, a random
    ``max(⌊clip_cov_ratio·N⌋, 1)`` get no gradient (their loss is multiplied by 0); N = valid tokens.

    Entropy falls fastest where a token's log-prob and its advantage covary most, so withholding the gradient
    of a few such tokens slows entropy collapse. Read from verl
    ``verl/trainer/ppo/core_algos.py::compute_policy_loss_clip_cov`` (defaults 2e-4, 1, 5; clip 0.2).

    The covariance is centered on the means over the valid tokens of the micro-batch the loss sees, and k
    and the candidate band are taken among that micro-batch's tokens too: the same minibatch gives different
    dropped tokens, hence a different gradient, for a different ``train.micro_batch_size``.
    """

    paper = "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv:2505.22617)"
    provenance = "CODE"

    clip_low: float = Field(default=0.2, ge=0)
    clip_high: float = Field(default=0.2, ge=0)
    clip_cov_ratio: float = Field(default=2e-4, gt=0, le=1)
    cov_lb: float = 1.0
    cov_ub: float = 5.0

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        r = ratio(logp, batch.old_logp)
        u, metrics = clipped_surrogate(r, adv, mask, self.clip_low, self.clip_high)
        cov = centered_covariance(adv, logp, mask)
        unclipped = (u <= -adv * r.detach()) & mask.bool()
        candidates = unclipped & (cov > self.cov_lb) & (cov < self.cov_ub)
        k = max(int(self.clip_cov_ratio * float(mask.sum())), 1)
        dropped = _pick(torch.rand_like(cov), candidates, k)
        metrics["cov_drop_frac"] = masked_mean(dropped.to(mask), mask)
        return LossOutput(u.masked_fill(dropped, 0.0), metrics)


@POLICY_LOSSES.register("kl_cov")
class KLCov(PolicyLoss):
    """Unclipped ``u_t = −A_t·r_t``, plus ``kl_coef·|logp_t − old_logp_t|`` on the
    ``max(⌊kl_cov_ratio·N⌋, 1)`` valid tokens of largest covariance ``(A_t − Ā)(logp_t − mean logp)``
    (N = valid tokens): a KL-like pull back to π_old on the few tokens that drive entropy down fastest.
    Read from verl ``verl/trainer/ppo/core_algos.py::compute_policy_loss_kl_cov`` (defaults ratio 2e-4,
    coefficient 1).

    The covariance is centered on the means over the valid tokens of the micro-batch the loss sees, and the
    top-covariance selection (k, and which tokens) is made among that micro-batch's tokens too: the same
    minibatch gives different selected tokens, hence a different loss and gradient, for a different
    ``train.micro_batch_size``.
    """

    paper = "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models (arXiv:2505.22617)"
    provenance = "CODE"

    kl_cov_ratio: float = Field(default=2e-4, gt=0, le=1)
    kl_coef: float = Field(default=1.0, ge=0)

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask, adv = batch.mask, batch.advantages
        r = ratio(logp, batch.old_logp)
        cov = centered_covariance(adv, logp, mask)
        k = max(int(self.kl_cov_ratio * float(mask.sum())), 1)
        picked = _pick(cov, mask.bool(), k)
        penalty = self.kl_coef * (logp - batch.old_logp).abs()
        metrics = {"ratio_mean": masked_mean(r.detach(), mask), "kl_cov_frac": masked_mean(picked.to(mask), mask)}
        return LossOutput(-adv * r + penalty * picked, metrics)
