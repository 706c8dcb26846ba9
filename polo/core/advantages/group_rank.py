"""Order statistics inside groups, vectorized: the rank of each sample in its group after a stable sort."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.segment import segment_sum


def group_rank(x: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``rank[B]``: position of each sample in its group sorted ascending by ``x``, ties by original index
    (a stable sort); also the group inverse ids ``inv[B]`` (0..G−1) and each sample's group size ``count[B]``."""
    _, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
    order = torch.sort(x, stable=True).indices
    order = order[torch.sort(inv[order], stable=True).indices]  # by group, then by x, then by index
    start = counts.cumsum(0) - counts
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=x.device) - start[inv[order]]
    return rank, inv, counts[inv]


def group_pick(x: Tensor, picked: Tensor, inv: Tensor) -> Tensor:
    """Per sample, the value of ``x`` at its group's one picked sample (``picked`` bool ``[B]``, one per group)."""
    return segment_sum(torch.where(picked, x, 0), inv)[inv]
