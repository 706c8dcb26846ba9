"""PlanPO: success-conditioned efficiency shaping of a trajectory-level GRPO advantage (step rows)."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_advantage, trajectory_mean
from polo.core.advantages.step_inputs import step_input, trajectories
from polo.core.agent_primitives import group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum


@ADVANTAGES.register("planpo")
class PlanPO(AdvantageEstimator):
    """Trajectory-level GRPO whose successes are ranked by planning efficiency, coarse (turns) then fine (tokens).

    In a task group g with outcomes ``o_i ∈ {0, 1}`` (``extras["correct"]``), ``T_i`` turns (step rows) per
    trajectory and ``S = {i : o_i = 1}``:

    * coarse efficiency, among successes only: ``e_i = (mean_S T − T_i)/(std_u,S T + eps)`` for ``i ∈ S`` when
      ``|S| ≥ 2``, else ``e_i = 0`` (fewer turns than the successful peers → positive);
    * shaped outcome ``R'_i = o_i + α·tanh(e_i)·[i ∈ S]`` and its group z-score over trajectories
      ``A_i = (R'_i − mean_g R')/(std_u,g R' + eps)`` (a group of one trajectory: mean 0, std 1);
    * fine efficiency of a turn, pooled over every turn of every success of g: with ``ℓ_{i,t}`` the action
      tokens of the row (``response_mask`` sum), ``f_{i,t} = (mean ℓ − ℓ_{i,t})/(std_u ℓ + eps)`` (0 when the
      pool has fewer than two turns);
    * ``A_{i,t} = A_i·(1 + β·tanh(f_{i,t}))`` when ``i ∈ S`` and ``A_i > 0``, else ``A_{i,t} = A_i``; broadcast
      over the row's action tokens.

    Since ``|α·tanh| < 0.5`` every success keeps ``R' > 0.5 > 0 =`` any failure's, and ``β ≤ 1`` keeps the fine
    factor positive, so every success's advantage stays above every failure's: brevity is rewarded only among
    successes. Paper: "PlanPO: Group Planning-aware Policy Optimization" (no arXiv id found). Reconstructed
    from the abstract: the z-score efficiency signals, the tanh bounds, α, β and the multiplicative turn term
    are our design. Also ours: a trajectory's value is the mean of its rows' (equal unless the engine wrote
    different values), ``correct`` must be constant over a trajectory, and fully masked rows still count in
    the fine pool with ``ℓ = 0``. Inputs ``traj``, ``step``, ``correct``. Diagnostics: ``planpo/success_frac``
    (share of trajectories that succeeded), ``planpo/coarse_active_frac`` (share of successes in a group with
    at least two), ``planpo/scaled_row_frac`` (share of rows with the fine factor) and
    ``planpo/coarse_abs_mean`` (mean ``|e|`` over successes).
    """

    paper = "PlanPO: Group Planning-aware Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "correct"})

    alpha: float = Field(default=0.2, ge=0, lt=0.5)
    """Weight α of the bounded coarse (turn-count) bonus in the shaped outcome; below 0.5 keeps successes first."""
    beta: float = Field(default=0.2, ge=0, le=1)
    """Strength β of the multiplicative fine (turn-length) factor on positive successful advantages."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to every std of a z-score."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage planpo"
        mask = batch.mask
        traj, step = step_input(batch, "traj", who), step_input(batch, "step", who)
        group = batch.group
        tinv, n_traj, group_t = trajectories(traj, group, who, step)
        correct = self._correct(batch, who).to(mask)
        o_t = trajectory_mean(correct, tinv, n_traj)
        lo = correct.new_full((n_traj,), torch.inf).scatter_reduce(0, tinv, correct, "amin")
        if not bool((lo == o_t).all()):
            raise ValueError(f"{who}: 'correct' must be the same on every row of a trajectory (the episode outcome)")
        succ_t = o_t > 0.5
        turns = segment_sum(torch.ones_like(o_t[tinv]), tinv, n_traj)
        mean_t, std_t, count_t = group_moments(turns, group_t, succ_t)
        coarse = torch.where(succ_t & (count_t >= 2), (mean_t - turns) / (std_t + self.eps), 0.0)
        shaped = o_t + self.alpha * torch.tanh(coarse) * succ_t
        adv_traj = trajectory_advantage(shaped[tinv], group, traj, tinv, n_traj, self.eps, who)
        length = mask.sum(1)
        succ = succ_t[tinv]
        mean_l, std_l, count_l = group_moments(length, group, succ)
        fine = torch.where(count_l >= 2, (mean_l - length) / (std_l + self.eps), 0.0)
        scaled = succ & (adv_traj > 0)
        adv = torch.where(scaled, adv_traj * (1 + self.beta * torch.tanh(fine)), adv_traj)
        n_succ = int(succ_t.sum())
        diagnostics = {
            "planpo/success_frac": float(succ_t.double().mean()) if n_traj else 0.0,
            "planpo/coarse_active_frac": float((count_t[succ_t] >= 2).double().mean()) if n_succ else 0.0,
            "planpo/scaled_row_frac": float(scaled.double().mean()) if len(adv) else 0.0,
            "planpo/coarse_abs_mean": float(coarse[succ_t].abs().mean()) if n_succ else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)

    @staticmethod
    def _correct(batch: RolloutBatch, who: str) -> Tensor:
        N = batch.batch_size
        where = (f"{who} needs the input 'correct' [{N}] (1.0 on every row of an episode that succeeded, else "
                 "0.0), written by the engine")
        value = batch.require("correct", where)
        if value.shape != (N,):
            raise ValueError(f"{where}; got shape {tuple(value.shape)}")
        if value.dtype != torch.bool and not bool(((value == 0) | (value == 1)).all()):
            raise ValueError(f"{where}; it holds values other than 0 and 1")
        return value
