"""VeRPO on unit tests: per-test results turned into a dense, difficulty-weighted reward."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.agent_primitives import group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum


def pass_rates(results: Tensor, inv: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """``([G, U] ρ, [G, U] seen)``: each group's pass rate of each test over the rollouts with a result for it,
    and whether any rollout of the group ran the test. ``results`` ``[B, U]``: 1 pass, 0 fail, NaN no such test."""
    ran = segment_sum((~results.isnan()).to(results.dtype), inv, n)
    return segment_sum(results.nan_to_num(0.0), inv, n) / ran.clamp_min(1), ran > 0


def rate_density(rate: Tensor, seen: Tensor, sigma: float) -> Tensor:
    """``[G, U]`` ``N̂_j = Σ_{j'} exp(−(ρ_j − ρ_{j'})² / 2σ²)`` over the group's seen tests (``j' = j``
    included)."""
    kernel = torch.exp(-(rate[:, :, None] - rate[:, None, :]) ** 2 / (2 * sigma**2))
    return (kernel * seen[:, None, :]).sum(-1)


def verpo_rewards(results: Tensor, group: Tensor, alpha: float, sigma: float, delta: float, gamma: float
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """``(R_turn [B], R_traj [B], w' [G, U])`` for one-turn rollouts: test weights
    ``w'_j = exp(−α ρ_j) / (N̂_j + δ)`` per group (0 on tests the group never ran), the dense reward
    ``R_turn,i = Σ_j w'_j P_ij`` and the outcome ``R_traj,i = γ·1[rollout i passed every test it ran]`` (0 for a
    rollout without any result)."""
    _, inv = torch.unique(group, return_inverse=True)
    n = int(inv.max()) + 1 if inv.numel() else 0
    rate, seen = pass_rates(results, inv, n)
    weight = torch.exp(-alpha * rate) / (rate_density(rate, seen, sigma) + delta) * seen
    dense = (weight[inv] * results.nan_to_num(0.0)).sum(-1)
    passed_all = (~results.isnan()).any(-1) & (results.nan_to_num(1.0) == 1).all(-1)
    return dense, passed_all.to(results.dtype) * gamma, weight


@ADVANTAGES.register("verpo_tests")
class VeRPOTests(AdvantageEstimator):
    """Single-turn VeRPO on per-test results ``P`` ``[B, U]`` (1 pass, 0 fail, NaN where the problem has fewer
    tests). Per group: test weights ``w'_j = exp(−α ρ_j) / (N̂_j + δ)`` (``ρ_j`` the group's pass rate of test j,
    ``N̂_j`` the Gaussian-kernel density, bandwidth σ, of pass rates over the group's tests), a dense reward
    ``R_turn,i = Σ_j w'_j P_ij`` and the outcome ``R_traj,i = γ·1[rollout i passed every test it ran]``;
    ``A_i = (R_traj,i − mean_g R_traj) + β·(R_turn,i − mean_g R_turn)`` (mean-centred, no std division),
    broadcast over the response tokens.

    Rarely passed tests weigh more, and a crowd of tests with similar pass rates shares its weight (the density
    divides it), so many easy tests cannot drown the few that separate the rollouts. A rollout without any
    result gets both rewards 0; a single-rollout group gets A = 0. Diagnostics: ``verpo/turn_reward`` (mean
    R_turn), ``verpo/pass_all`` (fraction of rollouts that passed every test).
    The defaults of α, σ, δ, β, γ are our choice (the paper's values were not available).
    """

    paper = "VeRPO: Verifiable Dense Reward Policy Optimization for Code Generation (arXiv:2601.03525)"
    provenance = "SECONDARY"
    requires: ClassVar[frozenset[str]] = frozenset({"test_results"})

    alpha: float = Field(1.0, ge=0)
    """α: difficulty sharpness of ``exp(−α ρ_j)``."""
    sigma: float = Field(0.1, gt=0)
    """σ: bandwidth of the pass-rate kernel density."""
    delta: float = Field(1e-6, ge=0)
    """δ: added to the density (a guard; N̂ ≥ 1)."""
    beta: float = 1.0
    """β: weight of the dense (per-test) advantage next to the outcome advantage."""
    gamma: float = Field(1.0, gt=0, le=1)
    """γ: outcome discount per turn (one turn here: R_traj = γ on success)."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        results = batch.input("test_results")
        if results is None or results.dim() != 2 or results.shape[0] != batch.batch_size:
            shape = None if results is None else tuple(results.shape)
            raise ValueError(f"advantage verpo_tests needs test_results [B={batch.batch_size}, U], got {shape}")
        results = results.to(mask.dtype)
        known = results.isnan() | (results == 0) | (results == 1)
        if not known.all():
            raise ValueError(f"advantage verpo_tests: test_results must be 1 (pass), 0 (fail) or NaN (no test), got "
                             f"{results[~known][:5].tolist()}")
        dense, outcome, _ = verpo_rewards(results, batch.group, self.alpha, self.sigma, self.delta, self.gamma)
        adv = (group_norm(outcome, batch.group, mode="mean", singleton="self_mean")
               + self.beta * group_norm(dense, batch.group, mode="mean", singleton="self_mean"))
        diagnostics = {"verpo/turn_reward": float(dense.mean()) if len(dense) else 0.0,
                       "verpo/pass_all": float(outcome.gt(0).double().mean()) if len(dense) else 0.0}
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
