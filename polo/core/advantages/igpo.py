"""IGPO: turn rewards from the growth of the policy's belief in the gold answer, group-normalized and summed
backwards over turns (step rows). Also the probe arithmetic an input provider uses to write ``gold_logp``."""
from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.step_inputs import episode_reward, step_input, trajectories, trajectory_length
from polo.core.agent_primitives import discounted_returns, group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES

VAR_EPS = 1e-8
"""Added to the population variance under the square root (IGPO's normalization)."""


def probe_logp(token_logps: Tensor, mask: Tensor | None = None) -> Tensor:
    """The belief probe's score ``ℓ = mean_k log π(y*_k | context, prefix, y*_<k)`` over the gold answer's
    tokens, ``[*]`` from ``token_logps [*, n]`` (``mask [*, n]`` marks the gold tokens; all when None). A row
    without gold tokens gives 0. This is what a provider writes as the ``gold_logp`` input."""
    if mask is None:
        return token_logps.mean(-1)
    m = mask.to(token_logps.dtype)
    return (token_logps * m).sum(-1) / m.sum(-1).clamp_min(1)


def probe_probability(token_logps: Tensor, mask: Tensor | None = None) -> Tensor:
    """``p = exp(ℓ)``, the geometric mean of the gold tokens' probabilities (``ℓ`` as in ``probe_logp``)."""
    return probe_logp(token_logps, mask).exp()


@ADVANTAGES.register("igpo")
class IGPO(AdvantageEstimator):
    """Information-gain turn rewards plus the outcome on the answer turn, normalized per task group, then
    summed backwards: ``A_{i,t} = Σ_{k≥t} γ^{k−t} r̃_{i,k}``, broadcast over the row's response tokens.

    Inputs, per step row (one row per turn, any order): ``traj``, ``step`` (0-based turn k) and ``gold_logp``
    ``ℓ_k`` = mean log-prob the policy gives the gold answer's tokens when asked to answer right after the
    context that precedes turn k (``ℓ_0``: the prompt only; ``probe_logp`` computes it from token log-probs).
    Turn k of a trajectory with T turns, ``p_k = exp(ℓ_k)``:

    * ``k < T−1``: ``r_k = w_ig·IG_k`` with ``IG_k = p_{k+1} − p_k`` (``info_gain_type: prob_diff``) or
      ``ℓ_{k+1} − ℓ_k`` (``log_prob_diff``): how much the turn (action and observation) raised the belief in
      the gold answer. A non-finite IG (overflowing ``exp``) counts as 0; a non-finite ``gold_logp`` is refused.
    * ``k = T−1`` (the answer turn): ``r_k = w_f1·R_i``, the episode outcome (``batch.scalar_reward()``, e.g.
      the answer's F1, with any format penalty already applied by the reward). A one-turn trajectory gets only
      this.

    Normalization inside task group g (``batch.group``): ``norm_mode: joint`` pools every turn reward of every
    trajectory of g; ``separate`` pools the outcome rewards and the IG rewards apart.
    ``r̃ = (r − μ)/(σ + eps)``, ``σ = sqrt(mean((r − μ)²) + 1e-8)`` (population variance) and σ = 1 for a pool
    of one value (which therefore gives 0); ``norm_adv_by_std: false`` keeps ``r − μ``. The weights ``w_f1``
    (``f1_weight``) and ``w_ig`` (``ig_weight``) are the optional curriculum, applied before normalization.
    Turns are rows here, so every turn is its own boundary (also when ``r̃ = 0``). The return-to-go runs over
    the turn index (``discounted_returns``); nothing loops over samples. Formulas follow the authors' code;
    one version of it leaves IG rewards of exactly 0 out of the pool and the turn boundaries, which we do not
    (every turn reward is pooled; our choice). Diagnostics: ``igpo/ig_mean``,
    ``igpo/ig_abs_mean`` (raw IG over non-final turns; 0 when none).

    Paper: "Information Gain-based Policy Optimization: A Simple and Effective Approach for Multi-Turn LLM
    Agents" (arXiv:2510.14967).
    """

    paper = ("Information Gain-based Policy Optimization: A Simple and Effective Approach for Multi-Turn LLM "
             "Agents (arXiv:2510.14967)")
    provenance = "CODE"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "gold_logp"})

    gamma: float = Field(default=1.0, ge=0, le=1)
    """Discount of the normalized turn rewards in the return-to-go."""
    info_gain_type: Literal["prob_diff", "log_prob_diff"] = "prob_diff"
    """IG as the change of the gold answer's probability p = exp(ℓ), or of its mean log-prob ℓ."""
    norm_mode: Literal["joint", "separate"] = "joint"
    """Normalize outcome and IG rewards in one pool per group, or in two separate pools."""
    norm_adv_by_std: bool = True
    """Divide the centred turn rewards by the pool's std + eps (False: centre only)."""
    f1_weight: float = Field(default=1.0, ge=0)
    """Curriculum weight of the outcome reward on the answer turn, applied before normalization."""
    ig_weight: float = Field(default=1.0, ge=0)
    """Curriculum weight of the IG rewards, applied before normalization."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to the pool's std before dividing."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage igpo"
        reward = episode_reward(batch, who)
        traj, step = step_input(batch, "traj", who), step_input(batch, "step", who)
        logp = step_input(batch, "gold_logp", who).to(reward)
        inv, n_traj, _ = trajectories(traj, batch.group, who, step)
        length = trajectory_length(inv, n_traj)
        step = step.long()
        final = step == length - 1
        # ℓ_{k+1} of each row from a [n_traj, T_max + 1] table (the extra column only serves final rows).
        table = logp.new_zeros(n_traj, int(step.max()) + 2 if n_traj else 1).index_put((inv, step), logp)
        nxt = table[inv, step + 1]
        ig = nxt.exp() - logp.exp() if self.info_gain_type == "prob_diff" else nxt - logp
        ig = torch.where(final | ~torch.isfinite(ig), 0.0, ig)
        r = torch.where(final, self.f1_weight * reward, self.ig_weight * ig)
        pool = batch.group.long() * 2 + final.long() if self.norm_mode == "separate" else batch.group
        mean, std, count = group_moments(r, pool, std_kind="population", singleton="self_mean")
        r_norm = r - mean
        if self.norm_adv_by_std:
            sigma = torch.where(count <= 1, 1.0, (std.square() + VAR_EPS).sqrt())
            r_norm = r_norm / (sigma + self.eps)
        adv = discounted_returns(r_norm, traj, step, self.gamma)
        ig_rows = ig[~final]
        diagnostics = {
            "igpo/ig_mean": float(ig_rows.mean()) if len(ig_rows) else 0.0,
            "igpo/ig_abs_mean": float(ig_rows.abs().mean()) if len(ig_rows) else 0.0,
        }
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
