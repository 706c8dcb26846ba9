"""SOPO: trajectory-level GRPO whose positive credit shrinks with the number of teacher-hinted attempts."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_advantage
from polo.core.advantages.step_inputs import binary_input, episode_reward, step_input, trajectories
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum


@ADVANTAGES.register("sopo")
class SOPO(AdvantageEstimator):
    """``Ã_i = A_i·λ_s^{k_i − 1}`` when ``A_i > 0``, else ``Ã_i = A_i``, on every step row of trajectory i.

    ``A_i`` is the z-score of the episode reward over the trajectories of the task group (``std_u``; a group of
    one trajectory: mean 0, std 1). ``k_i = 1 + #hinted turns`` counts the student's attempts: a step row with
    ``hint = 1`` is a turn whose observation carried a teacher's Socratic hint, so one more attempt followed.
    A success that needed hints keeps its sign but earns geometrically less, which pushes the policy towards
    answers that are right without help; failures keep their full (negative) advantage. Broadcast over each
    row's action tokens.

    Paper: "SOPO: Socratic-guided Policy Optimization" for span-level hallucination detection (no arXiv id
    found). Reconstructed from the abstract (multi-turn Socratic hints on wrong answers, turn-based advantage
    scaling): the ``λ_s^{k−1}`` law, leaving negative advantages unscaled and counting attempts from the hint
    rows are our design, as is taking a trajectory's outcome as the mean of its rows' rewards. Inputs ``traj``
    and ``hint``. Diagnostics: ``sopo/mean_attempts`` (mean k over trajectories), ``sopo/hinted_frac`` (share of
    trajectories with k > 1), ``sopo/hinted_turn_frac`` (share of step rows answered with a hint) and
    ``sopo/discounted_frac`` (share of trajectories whose positive advantage was scaled down).
    """

    paper = "SOPO: Socratic-guided Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "hint"})

    lambda_s: float = Field(default=0.8, ge=0, le=1)
    """Factor λ_s applied once per extra (hinted) attempt to a positive advantage."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the std of the trajectory z-score."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage sopo"
        mask = batch.mask
        reward = episode_reward(batch, who)
        traj = step_input(batch, "traj", who)
        hint = binary_input(step_input(batch, "hint", who), "hint", who)
        tinv, n_traj, _ = trajectories(traj, batch.group, who)
        attempts = 1 + segment_sum(hint.to(reward), tinv, n_traj)
        adv_traj = trajectory_advantage(reward, batch.group, traj, tinv, n_traj, self.eps, who)
        k = attempts[tinv]
        discounted = (adv_traj > 0) & (k > 1)
        adv = torch.where(adv_traj > 0, adv_traj * torch.full_like(k, self.lambda_s).pow(k - 1), adv_traj)
        per_traj = segment_sum(discounted.to(reward), tinv, n_traj) > 0
        diagnostics = {
            "sopo/mean_attempts": float(attempts.mean()) if n_traj else 0.0,
            "sopo/hinted_frac": float((attempts > 1).double().mean()) if n_traj else 0.0,
            "sopo/discounted_frac": float(per_traj.double().mean()) if n_traj else 0.0,
            "sopo/hinted_turn_frac": float(hint.double().mean()) if len(hint) else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
