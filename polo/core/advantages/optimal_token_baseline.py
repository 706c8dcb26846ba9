"""Optimal token baseline: a per-position baseline weighted by the accumulated score-norm proxy."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.weighted_group_baseline import logit_grad_proxy, weighted_group_baseline
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum


@ADVANTAGES.register("optimal_token_baseline")
class OptimalTokenBaseline(AdvantageEstimator):
    """Per position t: ``W_{i,t} = Σ_{s≤t} m·(1 − 2π_s + Σ_v π(v)²)`` (score-norm proxy accumulated along the
    prefix), ``G_{i,t} = R_i·m_{i,t}`` (outcome reward-to-go),
    ``B_t = Σ_{i∈g} G_{i,t}W_{i,t}m_{i,t} / Σ_{i∈g} W_{i,t}m_{i,t}`` (0 where that sum is 0; verl adds 1e-8 to
    it), ``A_{i,t} = (G_{i,t} − B_t)·m``. Singleton groups: B = 0.

    ``handle_zero_tail``: past the second-longest length of its group, the group's unique longest row would be
    its own baseline (A = 0); there it gets B = 0 instead. Matches verl's
    ``compute_optimal_token_baseline_advantage``.
    """

    paper = "The Optimal Token Baseline: Variance Reduction for Long-Horizon LLM-RL (arXiv:2602.07078)"
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
