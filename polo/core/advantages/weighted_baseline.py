"""Gradient-weighted group baselines: OBLR-PO (spec §19), OPO and verl's optimal token baseline.

All three weight the group's rewards by a proxy of each sample's squared score-function norm. The
per-token proxy ``‖∇_z log softmax(z)_y‖² = 1 − 2π_y + Σ_v π(v)²`` (π of the behaviour policy) is the one
volcengine/verl uses in ``compute_optimal_token_baseline_advantage``.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum


def logit_grad_proxy(old_logp: Tensor, sum_pi_sq: Tensor, mask: Tensor) -> Tensor:
    """``w_t = (1 − 2π_t + Σ_v π(v)²)·mask`` with ``π_t = exp(old_logp_t)``, ``[B,T]``."""
    return (1 - 2 * old_logp.exp() + sum_pi_sq) * mask


def weighted_group_baseline(reward: Tensor, weight: Tensor, group: Tensor, leave_one_out: bool) -> Tensor:
    """``b_i = Σ_{j∈g} ω_j R_j / Σ_{j∈g} ω_j`` over ``j ≠ i`` when ``leave_one_out``; works on ``[B]`` or
    ``[B,T]`` (per position). 0 in singleton groups and where the weights sum to 0."""
    _, inv, count = torch.unique(group, return_inverse=True, return_counts=True)
    num, den = segment_sum(weight * reward, inv)[inv], segment_sum(weight, inv)[inv]
    if leave_one_out:
        num, den = num - weight * reward, den - weight
    single = (count[inv] == 1).view(-1, *[1] * (reward.dim() - 1))
    return torch.where((den > 0) & ~single, num / den.clamp_min(torch.finfo(den.dtype).tiny), 0)


@ADVANTAGES.register("oblr_weighted_baseline")
class OBLRWeightedBaseline(AdvantageEstimator):
    """``A_i = R_i − b_i``, ``b_i = Σ_{j≠i} ω_j R_j / Σ_{j≠i} ω_j`` (all j when not ``leave_one_out``), no std
    scaling. ω_j ≈ ‖∇_θ log π(y_j)‖²: ``logit_grad`` = Σ_t m·(1 − 2π_t + Σ_v π(v)²) (needs ``sum_pi_sq``),
    ``length`` = |y_j|. A singleton group keeps ``A = R``.

    RECONSTRUCTED FROM ABSTRACT (spec §19); the exact per-sample gradient proxy is not offered.
    """

    spec = "single_turn_core.md §19"
    provenance = "RECONSTRUCTED"

    proxy: Literal["logit_grad", "length"] = "logit_grad"
    leave_one_out: bool = True

    def needs(self) -> set[str]:
        return set(self.requires) | ({"old_logp", "sum_pi_sq"} if self.proxy == "logit_grad" else set())

    def weights(self, batch: RolloutBatch) -> Tensor:
        mask = batch.mask
        if self.proxy == "length":
            return mask.sum(-1)
        return logit_grad_proxy(batch.old_logp.to(mask), batch.extras["sum_pi_sq"].to(mask), mask).sum(-1)

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        adv = reward - weighted_group_baseline(reward, self.weights(batch), batch.group, self.leave_one_out)
        return AdvantageResult(adv[:, None] * mask)


@ADVANTAGES.register("opo")
class OPO(OBLRWeightedBaseline):
    """OPO (arXiv 2505.23585; verl ``compute_opo_outcome_advantage``): length-weighted group baseline
    ``b_g = Σ_{j∈g} |y_j|·R_j / Σ_{j∈g} |y_j|``, ``A_i = R_i − b_g``; a singleton group keeps ``A = R``."""

    spec = ""
    provenance = "CODE"

    proxy: Literal["logit_grad", "length"] = "length"
    leave_one_out: bool = False


@ADVANTAGES.register("optimal_token_baseline")
class OptimalTokenBaseline(AdvantageEstimator):
    """verl's optimal token baseline (``compute_optimal_token_baseline_advantage``): per position t,
    ``W_{i,t} = Σ_{s≤t} m·(1 − 2π_s + Σ_v π(v)²)`` (cumulative path-variance proxy), ``G_{i,t} = R_i·m_{i,t}``
    (outcome reward-to-go), ``B_t = Σ_{i∈g} G_{i,t}W_{i,t}m_{i,t} / Σ_{i∈g} W_{i,t}m_{i,t}`` (0 where the sum is
    0; verl adds 1e-8 to it), ``A_{i,t} = (G_{i,t} − B_t)·m``. Singleton groups: B = 0.
    ``handle_zero_tail``: the group's unique longest row gets B = 0 beyond the second-longest length
    (where it would be its own baseline).
    """

    provenance = "CODE"
    requires = frozenset({"old_logp", "sum_pi_sq"})

    handle_zero_tail: bool = False

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        returns = batch.scalar_reward().to(mask)[:, None] * mask
        w = logit_grad_proxy(batch.old_logp.to(mask), batch.extras["sum_pi_sq"].to(mask), mask).cumsum(-1) * mask
        base = weighted_group_baseline(returns, w, batch.group, leave_one_out=False)
        if self.handle_zero_tail:
            base = torch.where(self._tail(mask, batch.group), 0, base)
        return AdvantageResult((returns - base) * mask)

    @staticmethod
    def _tail(mask: Tensor, group: Tensor) -> Tensor:
        """``[B,T]``: positions ≥ the second-longest length of the group, on the group's unique longest row."""
        _, inv = torch.unique(group, return_inverse=True)
        length = mask.sum(-1)
        longest = torch.zeros_like(length).scatter_reduce(0, inv, length, "amax")[inv]
        others = torch.where(length == longest, -1, length)
        second = torch.full_like(length, -1).scatter_reduce(0, inv, others, "amax")[inv]
        n_longest = segment_sum((length == longest).to(length), inv)[inv]
        unique = (length == longest) & (n_longest == 1) & (second >= 0)
        position = torch.arange(mask.shape[1], device=mask.device)
        return unique[:, None] & (position[None, :] >= second[:, None])
