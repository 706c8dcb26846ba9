"""Shared by the gradient-weighted baselines (``oblr_weighted_baseline``, ``opo``, ``optimal_token_baseline``).

The variance-minimizing constant baseline of a score-function estimator weights each sample's reward by its
squared score norm, ``b* = E[‖∇ log π(y)‖²·R] / E[‖∇ log π(y)‖²]``. These helpers compute that weighted mean
inside groups and a cheap per-token proxy of the squared norm from forward-pass probabilities.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.segment import segment_sum


def logit_grad_proxy(old_logp: Tensor, sum_pi_sq: Tensor, mask: Tensor) -> Tensor:
    """``w_t = (1 − 2π_t + Σ_v π(v)²)·mask`` with ``π_t = exp(old_logp_t)``, ``[B,T]``.

    For ``log softmax(z)_y`` the gradient w.r.t. the logits z is ``e_y − π``, whose squared norm is
    ``(1 − π_y)² + Σ_{v≠y} π(v)² = 1 − 2π_y + Σ_v π(v)²``: the squared score norm at the logits, from the
    behaviour policy's probabilities alone (``sum_pi_sq`` = Σ_v π(v)² per position).
    """
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
