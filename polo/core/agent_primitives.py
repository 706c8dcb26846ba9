"""Numeric primitives shared by the multi-turn agent estimators (step-row view: one batch row per turn).

* ``group_norm``: centre (and optionally scale) values by statistics of their group, with an explicit policy
  for groups of one member (verl's GRPO keeps the raw value; GiGPO's anchor groups give 0).
* ``discounted_returns``: the return-to-go ``G_t = Σ_{k≥t} γ^{k−t} r_k`` of every turn, from step rows that
  may come in any order.
* ``anchor_ids``: integer ids of anchor-state texts (exact match, or GiGPO's leader-first similarity
  clustering, independent of row order), for an engine to write as the ``anchor`` input; string work, so it
  runs where the texts are.

Everything on tensors is vectorized (``torch.unique`` with ``return_inverse`` and ``index_add``); no Python
loop runs over samples, groups or trajectories.
"""
from __future__ import annotations

import difflib
from collections import Counter
from typing import Literal, Sequence

import torch
from torch import Tensor

from polo.core.segment import segment_sum

NormMode = Literal["mean", "mean_std"]
StdKind = Literal["unbiased", "population"]
Singleton = Literal["zero_mean_unit_std", "self_mean"]


def group_moments(x: Tensor, group: Tensor, members: Tensor | None = None, std_kind: StdKind = "unbiased",
                  singleton: Singleton = "zero_mean_unit_std") -> tuple[Tensor, Tensor, Tensor]:
    """Per-row ``(mean, std, count)`` of the row's group, each ``[N]``.

    Statistics use only the rows where ``members`` is True (all rows when None); every row, member or not,
    receives its group's values. ``std`` is unbiased (divide by n−1) or population (divide by n). A group
    with exactly one member follows ``singleton``: ``"zero_mean_unit_std"`` gives mean 0 and std 1,
    ``"self_mean"`` gives that member's value as mean (so the member normalizes to 0) and std 1. A group
    without members gets mean 0, std 1.
    """
    if x.dim() != 1 or group.shape != x.shape:
        raise ValueError(f"group_moments: x and group must both be [N], got {tuple(x.shape)} and "
                         f"{tuple(group.shape)}")
    _, inv = torch.unique(group, return_inverse=True)
    n = int(inv.max()) + 1 if inv.numel() else 0
    weight = torch.ones_like(x) if members is None else members.to(x.dtype)
    count = segment_sum(weight, inv, n)
    # Shift by one member's value (the group's largest) before summing: a group of equal values then has
    # mean exactly equal to them and variance exactly 0, so it normalizes to exactly 0 in float32 too.
    shift = x.new_full((n,), -torch.inf).scatter_reduce(0, inv, torch.where(weight > 0, x, -torch.inf), "amax")
    shift = torch.where(count > 0, shift, 0.0)[inv]
    d = torch.where(weight > 0, x - shift, 0.0)
    mean_d = segment_sum(d, inv, n) / count.clamp_min(1)
    dof = count - 1 if std_kind == "unbiased" else count
    var = segment_sum(torch.where(weight > 0, (d - mean_d[inv]) ** 2, 0.0), inv, n) / dof.clamp_min(1)
    count, mean, std = count[inv], shift + mean_d[inv], var.sqrt()[inv]
    if singleton == "zero_mean_unit_std":
        mean = torch.where(count == 1, 0.0, mean)
    elif singleton != "self_mean":  # self_mean: the mean of one value is that value, kept as computed
        raise ValueError(f"unknown singleton policy {singleton!r}; expected zero_mean_unit_std or self_mean")
    mean = torch.where(count == 0, 0.0, mean)
    lone = count <= 1
    return mean, torch.where(lone, 1.0, std), count


def group_norm(x: Tensor, group: Tensor, mode: NormMode = "mean_std", std_kind: StdKind = "unbiased",
               singleton: Singleton = "zero_mean_unit_std", eps: float = 1e-6,
               members: Tensor | None = None) -> Tensor:
    """``x − mean_g`` (``mode="mean"``) or ``(x − mean_g) / (std_g + eps)`` (``mode="mean_std"``), ``[N]``.

    ``group`` holds arbitrary integer ids; ``members``, ``std_kind`` and ``singleton`` as in ``group_moments``.
    A group whose members all share one value gives exactly 0 in both modes. With ``singleton="self_mean"`` a
    one-member group gives 0 on its member; with ``"zero_mean_unit_std"`` it gives the raw value.
    """
    if mode not in ("mean", "mean_std"):
        raise ValueError(f"unknown group_norm mode {mode!r}; expected mean or mean_std")
    mean, std, _ = group_moments(x, group, members, std_kind, singleton)
    centred = x - mean
    return centred / (std + eps) if mode == "mean_std" else centred


def check_steps(traj: Tensor, step: Tensor) -> tuple[Tensor, int]:
    """Validate step rows and return ``(trajectory index [N] in 0..n_traj−1, n_traj)``.

    Every trajectory's ``step`` values must be exactly ``0, 1, …, T_i − 1`` (each once), in any row order.
    """
    if traj.dim() != 1 or step.shape != traj.shape:
        raise ValueError(f"traj and step must both be [N], got {tuple(traj.shape)} and {tuple(step.shape)}")
    if traj.is_floating_point() or step.is_floating_point():
        raise ValueError(f"traj and step must be integer tensors, got {traj.dtype} and {step.dtype}")
    _, inv = torch.unique(traj, return_inverse=True)
    n_traj = int(inv.max()) + 1 if inv.numel() else 0
    if not inv.numel():
        return inv, 0
    step = step.long()
    if int(step.min()) < 0:
        raise ValueError("step must be ≥ 0 (0-based turn index inside its trajectory)")
    count = segment_sum(torch.ones_like(step), inv, n_traj)
    last = step.new_full((n_traj,), -1).scatter_reduce(0, inv, step, "amax")
    pairs = torch.unique(inv * (int(step.max()) + 1) + step).numel()
    if pairs != len(step) or not bool((last + 1 == count).all()):
        raise ValueError("each trajectory's step rows must have the step indices 0..T−1, each exactly once")
    return inv, n_traj


def discounted_returns(rewards: Tensor, traj: Tensor, step: Tensor, gamma: float) -> Tensor:
    """Return-to-go ``G = Σ_{k≥t} γ^{k−t} r_k`` of each step row, ``[N]``
    (``disc(r, γ)[t] = r_t + γ·disc[t+1]``, ``disc[T] = 0``).

    ``traj`` groups rows into trajectories, ``step`` orders them (0..T_i−1, any row order; see
    ``check_steps``). The rewards are laid out as a ``[n_traj, T_max]`` table (zeros after each end) and
    multiplied by the upper-triangular discount matrix ``D[k, t] = γ^{k−t}·[k ≥ t]``, so no power of γ above 1
    appears (``γ ∈ [0, 1]``) and nothing overflows for small γ, as ``γ^{−t}``-scaled cumulative sums would.
    Cost O(n_traj·T_max²) time and O(T_max²) memory; fine for the tens to hundreds of turns agents use.

    float32 accuracy: each G is a dot product of at most T terms whose weights γ^j (computed in float64,
    rounded once) are ≤ 1, so its error stays within T·2⁻²⁴ of ``Σ_k γ^{k−t}|r_k|`` (the textbook bound for
    a sum of T products; typically √T); for T = 50 that is ≤ 3e-6 of ``Σ|r|``.
    """
    if rewards.shape != traj.shape:
        raise ValueError(f"rewards must be [N] like traj, got {tuple(rewards.shape)} and {tuple(traj.shape)}")
    inv, n_traj = check_steps(traj, step)
    if not n_traj:
        return rewards.clone()
    step = step.long()
    width = int(step.max()) + 1
    table = rewards.new_zeros(n_traj, width).index_put((inv, step), rewards)
    lag = torch.arange(width, device=rewards.device)
    lag = lag[:, None] - lag[None, :]  # k − t
    base = torch.tensor(float(gamma), dtype=torch.float64, device=rewards.device)
    powers = torch.where(lag >= 0, base ** lag.clamp_min(0).double(), 0.0)
    return (table @ powers.to(rewards.dtype))[inv, step]


def text_similarity(a: str, b: str) -> float:
    """``max(ratio(a, b), ratio(b, a))`` with ``ratio`` difflib's ``SequenceMatcher(None, ·, ·).ratio()``
    (``2·matches / (len a + len b)``). difflib's ratio depends on which text comes first (its longest-match
    search and, past 200 characters, its junk heuristic look at the second one only); taking the better of the
    two orders makes it symmetric and never below either one-way ratio."""
    return max(difflib.SequenceMatcher(None, a, b).ratio(), difflib.SequenceMatcher(None, b, a).ratio())


def anchor_ids(texts: Sequence[str], groups: Sequence[int] | None = None,
               similarity_thresh: float | None = None) -> list[int]:
    """Integer anchor-state ids for the ``anchor`` input of step rows: equal ids ⇔ same anchor cluster, numbered
    in order of first appearance; ids are unique across groups.

    Without ``similarity_thresh``, rows share an id exactly when their texts are equal. With it (GiGPO's
    ``enable_similarity``, "GiGPO: Group-in-Group Policy Optimization for LLM Agent Training", arXiv:2505.10978),
    each group's distinct texts are clustered leader-first: visited most frequent first (ties by text), a text
    joins the first cluster whose leader has ``text_similarity ≥ similarity_thresh``, else it leads a new one.
    The visiting order and the similarity are both independent of the order the rows arrive in, so a
    permutation of the rows permutes the ids and never changes the grouping. verl-agent's rule is the same
    first-fit against leaders, but in arrival order and with the one-way ratio ``ratio(new, leader)``: every pair
    it merges with a leader scores as high here; a pair that is similar in one order only (e.g.
    ``"dchbededac"``/``"gchbedecdc"``: 0.8 one way, 0.7 the other) is merged here at threshold 0.8 whichever
    arrives first, where verl-agent merges it only when "gchbedecdc" arrives first. This is string processing
    for the engine that holds the texts (O(distinct texts × clusters) comparisons per group).
    """
    groups = [0] * len(texts) if groups is None else list(groups)
    if len(groups) != len(texts):
        raise ValueError(f"anchor_ids: {len(texts)} texts but {len(groups)} group ids")
    keys = list(zip(groups, texts))
    if similarity_thresh is not None:
        counts = Counter(keys)
        leaders: dict[int, list[str]] = {}
        cluster: dict[tuple[int, str], tuple[int, str]] = {}
        for g, text in sorted(counts, key=lambda key: (-counts[key], key)):
            own = leaders.setdefault(g, [])
            leader = next((lead for lead in own if text_similarity(lead, text) >= similarity_thresh), None)
            if leader is None:
                own.append(text)
                leader = text
            cluster[g, text] = (g, leader)
        keys = [cluster[key] for key in keys]
    first: dict[tuple[int, str], int] = {}
    return [first.setdefault(key, len(first)) for key in keys]
