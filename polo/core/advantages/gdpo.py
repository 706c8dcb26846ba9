"""GDPO and GD²PO: each reward component normalized in its group before the components are summed."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.agent_primitives import group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_rank, masked_whiten, segment_sum

SIGN_TOL = 1e-8
"""A normalized component counts as positive above +SIGN_TOL, negative below −SIGN_TOL (GD²PO's code)."""
SAMPLE_EPS = 1e-4
"""``whiten: sample`` divides by ``std + SAMPLE_EPS`` (TRL's GDPO); ``token`` adds 1e-8 to the variance (verl's)."""


def component_advantages(rewards: Tensor, present: Tensor, group: Tensor, eps: float) -> Tensor:
    """``[B, K]``: ``Â[i,k] = (R[i,k] − mean_g R[:,k]) / (std_g R[:,k] + eps)`` per component, the group statistics
    (unbiased std) over the rows where component k is ``present``; 0 where it is not. A group whose component has
    one present row keeps that raw value (GRPO's lone-sample rule); equal values give exactly 0."""
    B, K = rewards.shape
    _, inv = torch.unique(group, return_inverse=True)
    cell = (inv[:, None] * K + torch.arange(K, device=inv.device)).flatten()  # one segment per (group, component)
    adv = group_norm(rewards.where(present, 0.0).flatten(), cell, eps=eps, members=present.flatten()).view(B, K)
    return adv * present


def opposed(comp: Tensor) -> Tensor:
    """``[B, K]`` bool: component k of row i is nonzero (``|Â| > SIGN_TOL``) and some other component of the row
    has the opposite sign (the components that take part in the row's conflict)."""
    pos, neg = comp > SIGN_TOL, comp < -SIGN_TOL
    return (pos & neg.any(-1, keepdim=True)) | (neg & pos.any(-1, keepdim=True))


def conflicted(comp: Tensor) -> Tensor:
    """``[B]`` bool: some normalized component is positive and another negative (``> SIGN_TOL``, ``< −SIGN_TOL``)."""
    return opposed(comp).any(-1)


def consensus(comp: Tensor) -> Tensor:
    """``[B]`` ``κ_i = Σ_k Â[i,k] / (Σ_k |Â[i,k]| + SIGN_TOL)``: ±1 when all components agree, near 0 when they
    cancel."""
    return comp.sum(-1) / (comp.abs().sum(-1) + SIGN_TOL)


def order_changes(decoupled: Tensor, summed: Tensor, group: Tensor) -> float:
    """The share of same-group row pairs that ``decoupled`` (``S``) orders differently from ``summed`` (the
    weighted reward sum GRPO would normalize): ``sign(S_i − S_j) ≠ sign(r_i − r_j)``, over the pairs where either
    differs (beyond SIGN_TOL). 0 when the per-component normalization changes no ranking, i.e. when GDPO's
    advantage orders every group as GRPO's would. Compared in ``[groups, G, G]`` blocks (G: the largest group),
    not over all ``B²`` row pairs."""
    slot, inv, count = group_rank(torch.zeros_like(summed), group)  # each row's place in its group
    G = int(count.max()) if len(count) else 0
    grid = torch.full((int(inv.max()) + 1 if len(inv) else 0, G), -1, dtype=torch.long, device=group.device)
    grid[inv, slot] = torch.arange(len(group), device=group.device)  # [groups, G] row ids, -1 past a group's end
    rows = grid.clamp_min(0)
    same = ((grid[:, :, None] >= 0) & (grid[:, None, :] >= 0)).triu(1)  # each same-group pair once

    def signs(x: Tensor) -> Tensor:
        d = x[rows][:, :, None] - x[rows][:, None, :]
        return torch.where(d.abs() > SIGN_TOL, d.sign(), torch.zeros_like(d))

    sign_s, sign_r = signs(decoupled), signs(summed)
    ranked = same & ((sign_s != 0) | (sign_r != 0))
    return float(((sign_s != sign_r) & ranked).sum() / ranked.sum().clamp_min(1))


def whiten_rows(x: Tensor, mask: Tensor, keep: Tensor, how: str) -> Tensor:
    """``[B, T]`` the sequence values ``x`` ``[B]`` on the tokens of the kept rows, whitened over them:
    ``token``: masked whitening over the kept tokens (a row of length L counts L times; unbiased variance + 1e-8
    under the root), ``sample``: ``(x − mean)/(std + 1e-4)`` over the kept rows that have tokens (unbiased std),
    ``none``: x as is. Dropped rows and padding get 0, and so does everything when at most one token (row) is
    kept (x − mean is then 0)."""
    tokens = mask * keep[:, None].to(mask.dtype)
    if how == "token":
        if tokens.sum() <= 1:
            return torch.zeros_like(tokens)
        return masked_whiten(x[:, None] * tokens, tokens) * tokens
    if how == "sample":
        members = keep & (mask.sum(-1) > 0)
        x = group_norm(x, torch.zeros_like(keep, dtype=torch.long), singleton="self_mean", eps=SAMPLE_EPS,
                       members=members)
    return x[:, None] * tokens


@ADVANTAGES.register("gdpo_decoupled")
class GDPO(AdvantageEstimator):
    """Reward-decoupled normalization over the K reward columns ``R`` ``[B, K]`` (shaping columns included):
    ``Â[:,k]`` = GRPO z-score of column k in each group (unbiased std, ``eps``), ``S_i = Σ_k ω_k Â[i,k]`` with
    ``ω`` the reward weights, then ``A = whiten(S)`` over the batch (``whiten``: ``token``, verl's token-weighted
    masked whitening; ``sample``, TRL's ``(S − mean)/(std + 1e-4)`` over samples; ``none``).

    Summing the components before a GRPO z-score lets the widest-spread component decide the advantage and maps
    different reward combinations onto the same value; normalizing each component first keeps every
    component's ranking in the signal. A reward that returned None for a row (``extras["reward_present"]``
    False, or a NaN reward) is left out of that column's group statistics and contributes 0 to the row's sum.
    A row that no reward scored is left out of the batch whitening too and gets advantage exactly 0, so it
    moves no other row (TRL's ``normalize_then_sum``: its summed reward is NaN, dropped by the batch
    ``nanmean``/``nanstd`` and set to 0). Rewards [1, 0, None, 1 | 0, 0, 1, 1] in two groups of four give
    0.632 / −0.949 (−1.265 for the scored 0 of group 1), not the 0.683 / −1.025 of counting the unscored row.
    Logs ``gdpo/order_changes``: the share of same-group pairs whose order under S differs from the order under
    the summed reward (what decoupling changes; ``order_changes``).
    """

    paper = ("GDPO: Group reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization "
             "(arXiv:2601.05242)")
    provenance = "CODE"
    requires = frozenset({"reward_present"})
    """Written by every engine; a batch without it (built by hand) counts every reward present."""

    eps: float = Field(1e-6, gt=0)
    """Added to each component's group std."""
    whiten: Literal["token", "sample", "none"] = "token"
    """Batch whitening of the summed advantage: ``token`` (verl, token-weighted), ``sample`` (TRL), ``none``."""

    def presence(self, batch: RolloutBatch) -> Tensor:
        """``[B, K]`` bool: reward k scored row i (``reward_present`` and a finite value)."""
        rewards = batch.rewards
        present = batch.extras.get("reward_present")
        present = torch.ones_like(rewards, dtype=torch.bool) if present is None else present.bool()
        if present.shape != rewards.shape:
            raise ValueError(f"advantage {self.registry_name}: reward_present has shape {tuple(present.shape)}, "
                             f"rewards {tuple(rewards.shape)}")
        return present & rewards.isfinite()

    def components(self, batch: RolloutBatch) -> Tensor:
        """``[B, K]`` the per-component group-normalized advantages ``Â``."""
        return component_advantages(batch.rewards.to(batch.mask.dtype), self.presence(batch), batch.group, self.eps)

    def selection(self, comp: Tensor, group: Tensor, scored: Tensor,
                  names: Sequence[str] = ()) -> tuple[Tensor, Tensor, dict[str, float]]:
        """``(keep [B] bool, scale [B], diagnostics)`` over the ``scored`` rows (``names``: the K components'):
        GDPO keeps every one at scale 1."""
        return scored, comp.new_ones(len(comp)), {}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        comp = self.components(batch)
        total = comp @ batch.reward_weights.to(comp)
        present = self.presence(batch)
        keep, scale, diagnostics = self.selection(comp, batch.group, present.any(-1), batch.reward_names)
        summed = batch.rewards.to(comp).where(present, 0.0) @ batch.reward_weights.to(comp)
        diagnostics["gdpo/order_changes"] = order_changes(total, summed, batch.group)
        return AdvantageResult(whiten_rows(total * scale, batch.mask, keep, self.whiten), diagnostics=diagnostics)


@ADVANTAGES.register("gd2po")
class GD2PO(GDPO):
    """GDPO with conflicted rollouts dropped. A rollout is conflicted when one normalized component is positive
    and another negative (``Â > 1e-8`` and ``Â < −1e-8``); ``variant: hard`` drops every conflicted rollout,
    ``snr`` only those whose consensus ``κ_i = Σ_k Â[i,k] / (Σ_k |Â[i,k]| + 1e-8)`` has ``|κ_i| < tau``. With
    ``q_g`` the fraction of group g's scored rollouts kept, ``X_i = q_g·S_i`` on the kept rollouts is whitened
    over the kept tokens only; dropped rollouts get exactly 0 (all 0 when nothing is kept).

    A conflicted rollout's components pull the policy both ways and cancel out; dropping it and scaling each
    query by how much of its group agrees keeps the update on the rollouts whose signal is consistent.
    Diagnostics: ``gd2po/conflict_frac`` (rollouts with mixed signs), ``gd2po/drop_frac`` (rollouts dropped) and,
    per reward component, ``gd2po/drop_frac/NAME`` (rollouts dropped in whose conflict component NAME takes part: 0
    for a component that is constant within every group, e.g. a length term no rollout reaches).
    """

    paper = ("GD²PO: Mitigating Multi-Reward Conflicts via Group-Dynamic reward-Decoupled Policy Optimization "
             "(arXiv:2606.16771)")
    provenance = "CODE"

    variant: Literal["hard", "snr"] = "hard"
    """``hard``: drop every conflicted rollout; ``snr``: only those with consensus |κ| < tau."""
    tau: float = Field(0.8, ge=0, le=1)
    """Consensus threshold of the ``snr`` variant."""

    def selection(self, comp: Tensor, group: Tensor, scored: Tensor,
                  names: Sequence[str] = ()) -> tuple[Tensor, Tensor, dict[str, float]]:
        """Keep the scored rollouts that are not (severely) conflicted; scale by their group's keep ratio."""
        conflict = conflicted(comp)
        drop = conflict & (consensus(comp).abs() < self.tau) if self.variant == "snr" else conflict
        keep = scored & ~drop
        _, inv = torch.unique(group, return_inverse=True)
        kept = segment_sum(keep.to(comp.dtype), inv) / segment_sum(scored.to(comp.dtype), inv).clamp_min(1)
        n = max(len(comp), 1)
        diagnostics = {"gd2po/conflict_frac": float(conflict.sum()) / n, "gd2po/drop_frac": float(drop.sum()) / n}
        involved = (opposed(comp) & drop[:, None]).sum(0).tolist()
        diagnostics.update({f"gd2po/drop_frac/{name}": count / n for name, count in zip(names, involved)})
        return keep, kept[inv], diagnostics
