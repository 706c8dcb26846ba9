"""MAPO (dialogue): Monte Carlo returns of per-turn judge scores, z-scored among same-turn peers of the group
and over the whole batch, then mixed (step rows)."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.step_inputs import episode_reward, step_input, trajectories, trajectory_length
from polo.core.agent_primitives import discounted_returns, group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


@ADVANTAGES.register("mapo")
class MAPO(AdvantageEstimator):
    """Mixed Advantage Policy Optimization for long-horizon multi-turn dialogue (arXiv 2603.06194; not the
    unrelated "MAPO" of arXiv 2509.18849, which rescales reasoning advantages by percent deviation).

    Turn reward ``r_{i,t} = s_{i,t}``, the judge's score of the turn in [0, 1], plus
    ``outcome_weight·R_i`` on the last turn (``R_i`` = ``batch.scalar_reward()``, the episode outcome; off by
    default). Return ``G_{i,t} = Σ_{k≥t} γ^{k−t} r_{i,k}``, so a turn is credited for what it does to the rest
    of the conversation. Two z-scores of ``G``:

    * turn level: against ``P_{g,t}``, the returns at the same turn index t of the trajectories of task group g
      that reached turn t, ``(G − mean P)/(std_u P + eps)``; 0 when ``|P_{g,t}| < 2``. Comparing same-index
      turns stands in for sampling several replies from one dialogue state.
    * batch level: against every return of the batch, ``(G − mean)/(std_u + eps)`` (a batch of one return
      gives 0).

    ``A_{i,t} = λ·A^turn + (1 − λ)·A^batch`` on the row's response tokens. The paper's abstract gives only the
    idea; ours are the reading of "turn level" as same turn index within the group, λ = 0.5, γ = 0.9, the
    small-pool rule, the one-return batch rule and the optional outcome term. Vectorized; no loop.

    Where ``s`` comes from (``judge``): ``role``, the paper's judge model: the step input ``turn_judge`` that the
    ``judge`` role writes for every turn (its context, action and observation; polo.inputs.turn_judge), a failed
    judgment (NaN) replaced by the mean of the batch's judged turns (ours); ``oracle``: the environment's own
    per-turn score, the step input ``judge`` (GuessNum's information judge), a cheap stand-in for a judge.
    Diagnostics: ``mapo/turn_pool_singleton_frac``, the share of (group, turn index) pools holding one return;
    ``mapo/judge_mean`` and ``mapo/judge_std``, the turn scores' mean and unbiased std (a constant judge makes the
    advantage the outcome term alone); ``mapo/judge_missing_frac``, the share of turns whose judgment failed.
    """

    paper = "MAPO: Mixed Advantage Policy Optimization for Long-Horizon Multi-Turn Dialogue (arXiv:2603.06194)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "turn_judge"})

    judge: Literal["role", "oracle"] = "role"
    """The turn scores: ``role``, the judge role's (input ``turn_judge``); ``oracle``, the environment's (``judge``)."""

    gamma: float = Field(default=0.9, ge=0, le=1)
    """Discount of the turn rewards in the Monte Carlo return."""
    lam: float = Field(default=0.5, ge=0, le=1)
    """λ: weight of the turn-level z-score; 1 − λ goes to the batch-level one."""
    outcome_weight: float = Field(default=0.0, ge=0)
    """Weight of the episode outcome added to the last turn's judge score (0: judge scores only)."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to every std before dividing."""

    @property
    def judge_input(self) -> str:
        """The step input holding the turn scores."""
        return "turn_judge" if self.judge == "role" else "judge"

    def needs(self) -> set[str]:
        return {"traj", "step", self.judge_input}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage mapo"
        reward = episode_reward(batch, who)
        traj, step = step_input(batch, "traj", who), step_input(batch, "step", who)
        name = self.judge_input
        judge = step_input(batch, name, who, missing_ok=self.judge == "role").to(reward)
        missing = judge.isnan()
        judged = judge[~missing]
        if len(judged) and not bool(((judged >= 0) & (judged <= 1)).all()):
            raise ValueError(f"{who}: the step-row input {name!r} must hold scores in [0, 1], got values in "
                             f"[{float(judged.min()):g}, {float(judged.max()):g}]")
        judge = torch.where(missing, judged.mean() if len(judged) else 0.0, judge)
        tinv, n_traj, _ = trajectories(traj, batch.group, who, step)
        length = trajectory_length(tinv, n_traj)
        step = step.long()
        r = judge + torch.where(step == length - 1, self.outcome_weight * reward, 0.0)
        ret = discounted_returns(r, traj, step, self.gamma)

        pool = torch.unique(torch.stack([batch.group.long(), step], 1), dim=0, return_inverse=True)[1]
        mean, std, count = group_moments(ret, pool)
        a_turn = torch.where(count >= 2, (ret - mean) / (std + self.eps), 0.0)
        mean, std, _ = group_moments(ret, torch.zeros_like(pool), singleton="self_mean")
        a_batch = (ret - mean) / (std + self.eps)
        adv = self.lam * a_turn + (1 - self.lam) * a_batch
        size = torch.bincount(pool)
        diagnostics = {"mapo/turn_pool_singleton_frac": float((size == 1).double().mean()) if len(size) else 0.0,
                       "mapo/judge_mean": float(judged.mean()) if len(judged) else 0.0,
                       "mapo/judge_std": float(judged.std()) if len(judged) > 1 else 0.0,
                       "mapo/judge_missing_frac": float(missing.double().mean()) if len(judge) else 0.0}
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
