"""CIPO (counterfactual imagination policy optimization) on step rows: the trajectory's GRPO outcome advantage
plus the paired outcome gain over a counterfactual rollout, credited to the granularity decision it replayed."""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import episode_advantage
from polo.core.advantages.step_inputs import binary_input, episode_reward, step_input, trajectories
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

CIPO_INPUTS = ("traj", "cf_decision", "cf_delta")


@ADVANTAGES.register("cipo")
class CIPO(AdvantageEstimator):
    """Trajectory credit on every action token, plus a counterfactual gain on one granularity decision.

    When an agent can call atomic tools or composite skills (tool sequences mined from successful episodes,
    ``polo.methods.cipo.skill_mining.mine_skills``), the engine branches each base rollout once, at its first
    eligible granularity decision t*: it swaps the chosen option for the other granularity (skill ↔ atomic
    call), lets the policy finish, and records the outcome ``R^cf_i``. The decision row carries
    ``cf_decision = 1`` and ``cf_delta = Δ_i = R_i − R^cf_i``; every other row has 0 and 0.

    * ``A^traj_i = (R_i − mean_g R) / (std_u,g R + eps)``, one value per trajectory of task group g
      (``batch.group``); a one-trajectory group has mean 0, std 1.
    * ``A_{i,t} = A^traj_i + lam_cf·Δ_i·[t = t*]``, broadcast over the row's response tokens.

    A positive Δ says the chosen granularity beat its alternative, so the decision is pushed up beyond the
    outcome's share; a trajectory without an eligible decision gets the trajectory term only. The
    counterfactual rollout only supplies ``R^cf``: it is never a batch row and is not trained (training its
    decision turn with ``−lam_cf·Δ`` is not supported). Our design choices (the paper's method was reconstructed
    from its abstract): the n-gram skill scoring, the eligibility rule, lam_cf and applying Δ to the decision
    row only. Vectorized over rows. Diagnostics: ``cipo/decision_frac`` (share of trajectories with a decision
    row), ``cipo/delta_mean`` and ``cipo/delta_abs_mean`` (over decision rows); with the brancher's
    ``skills_mined`` and ``skills_offered`` rows (polo.methods.cipo.brancher), ``cipo/mined_skills`` (skills mined
    this step) and ``cipo/mined_offered`` (the environment's composites among them, offered as alternatives).
    """

    paper = "Counterfactual Imagination Policy Optimization (CIPO; arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires: ClassVar[frozenset[str]] = frozenset(CIPO_INPUTS)

    lam_cf: float = Field(default=0.5, ge=0)
    """Weight of the counterfactual gain Δ = R − R^cf added on the decision row (0: trajectory GRPO only)."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the unbiased std of the trajectory z-score."""

    def needs(self) -> set[str]:
        return set(self.requires) if self.lam_cf > 0 else {"traj"}

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage cipo"
        mask = batch.mask
        reward = episode_reward(batch, who)
        inputs = {name: step_input(batch, name, who) for name in sorted(self.needs())}
        traj = inputs["traj"]
        adv = episode_advantage(reward, batch.group, traj, "mean_std", "trajectories", self.eps, who)
        diagnostics: dict[str, float] = {}
        if self.lam_cf > 0:
            is_dec = binary_input(inputs["cf_decision"], "cf_decision", who)
            delta = inputs["cf_delta"].to(reward)
            if bool((delta[~is_dec] != 0).any()):
                raise ValueError(f"{who}: the input 'cf_delta' must be 0.0 on rows that are no decision turn "
                                 "(cf_decision = 0)")
            tinv, n_traj, _ = trajectories(traj, batch.group, who)
            per_traj = segment_sum(is_dec.long(), tinv, n_traj)
            if bool((per_traj > 1).any()):
                raise ValueError(f"{who}: a trajectory has several decision rows (cf_decision = 1); a base "
                                 "rollout branches once, at its first eligible decision")
            adv = adv + self.lam_cf * delta
            n_dec = int(is_dec.sum())
            diagnostics = {
                "cipo/decision_frac": float(n_dec / n_traj) if n_traj else 0.0,
                "cipo/delta_mean": float(delta[is_dec].mean()) if n_dec else 0.0,
                "cipo/delta_abs_mean": float(delta[is_dec].abs().mean()) if n_dec else 0.0,
            }
        for name, key in (("skills_mined", "cipo/mined_skills"), ("skills_offered", "cipo/mined_offered")):
            if name in batch.extras and batch.batch_size:
                diagnostics[key] = float(batch.extras[name].max())
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
