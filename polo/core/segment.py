"""Segment (group) statistics, order statistics inside groups and masked reductions, vectorized with scatter ops."""
from __future__ import annotations

import torch
from torch import Tensor


def segment_sum(x: Tensor, group: Tensor, num_groups: int | None = None) -> Tensor:
    """``out[g] = Σ_{i: group[i]=g} x[i]`` for group ids in ``[0, num_groups)``; shape ``[G, *x.shape[1:]]``."""
    if num_groups is None:
        num_groups = int(group.max()) + 1 if group.numel() else 0
    return x.new_zeros((num_groups, *x.shape[1:])).index_add(0, group, x)


def run_starts(ids: Tensor) -> Tensor:
    """``[N]`` bool: True where a run of equal consecutive ``ids`` begins (row 0 always)."""
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[1:] = ids[1:] != ids[:-1]
    return starts


def run_start_rows(ids: Tensor) -> Tensor:
    """``[N]`` the index of the first row of each row's run of equal consecutive ``ids``."""
    rows = torch.arange(len(ids), device=ids.device)
    return torch.cummax(torch.where(run_starts(ids), rows, 0), 0).values


def equal_groups(group: Tensor) -> Tensor:
    """``[n, G]``: the row indices of each of the n groups (ids in any order, rows in batch order), for
    per-group math on dense ``[n, G, ...]`` blocks: ``x[idx]`` gathers, ``out[idx] = y`` scatters back.
    ValueError unless every group has the same size G."""
    _, inv, counts = torch.unique(group, return_inverse=True, return_counts=True)
    if len(counts) and bool((counts != counts[0]).any()):
        raise ValueError(f"expected groups of equal size, got sizes {sorted(set(counts.tolist()))}")
    return torch.sort(inv, stable=True).indices.view(len(counts), len(group) // max(len(counts), 1))


def group_stats(x: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample mean, unbiased std and size of the sample's group, each ``[B]``.

    Group ids are arbitrary integers (any order). A singleton group gets mean 0 and std 1, so a
    z-score leaves its value unchanged (a lone sample keeps its raw reward as advantage).
    """
    _, inv = torch.unique(group, return_inverse=True)
    count = segment_sum(torch.ones_like(x), inv)
    mean = segment_sum(x, inv) / count
    var = segment_sum((x - mean[inv]) ** 2, inv) / (count - 1).clamp_min(1)
    single = count == 1
    mean = torch.where(single, 0.0, mean)
    std = torch.where(single, 1.0, var.sqrt())
    return mean[inv], std[inv], count[inv]


def group_stats_where(x: Tensor, group: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``group_stats`` over the rows where ``valid`` (bool ``[B]``) only, e.g. leaving out unscored samples;
    a row outside ``valid`` gets mean 0, std 1 and count 0."""
    mean, std, count = group_stats(x[valid], group[valid])
    return (torch.zeros_like(x).masked_scatter(valid, mean), torch.ones_like(x).masked_scatter(valid, std),
            torch.zeros_like(x).masked_scatter(valid, count))


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


def group_reward_spread(reward: Tensor, group: Tensor) -> Tensor:
    """max − min of the scalar reward within each group, ``[num_groups]``."""
    _, index = torch.unique(group, return_inverse=True)
    n = int(index.max()) + 1
    high = reward.new_full((n,), -torch.inf).scatter_reduce(0, index, reward, "amax")
    low = reward.new_full((n,), torch.inf).scatter_reduce(0, index, reward, "amin")
    return high - low


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``Σ mask·x`` over ``dim`` (all dims when None)."""
    return (x * mask).sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """``Σ mask·x / Σ mask`` over ``dim`` (all dims when None); 0 where the mask is empty."""
    total = masked_sum(x, mask, dim)
    return total / mask.sum(dim=dim).to(total.dtype).clamp_min(torch.finfo(total.dtype).tiny)


def masked_whiten(
    x: Tensor, mask: Tensor, unbiased: bool = True, eps: float = 1e-8, var_floor: float | None = None
) -> Tensor:
    """``(x − μ) / sqrt(σ² + eps)`` with μ, σ² the masked mean / variance over all valid entries, or
    ``(x − μ) / sqrt(max(σ², var_floor))`` when ``var_floor`` is given (eps is then unused).

    ``unbiased`` scales σ² by n/(n−1), n = Σ mask (verl's ``masked_whiten``, which adds eps); else the
    population variance (OpenRLHF, which floors it: ``var.clamp(min=1e-8)``). Raises ValueError if n ≤ 1.
    """
    n = float(mask.sum())
    if n <= 1:
        raise ValueError(f"masked_whiten needs more than one valid entry, got {n:g}")
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        var = var * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + eps if var_floor is None else var.clamp(min=var_floor))
