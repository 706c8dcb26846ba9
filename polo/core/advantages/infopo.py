"""InfoPO: a GRPO outcome advantage plus a group-normalized counterfactual information-gain advantage, mixed
through a variance gate (step rows). Also ``counterfactual_gain``, the probe arithmetic of the ``info_gain``
input's provider."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.step_inputs import episode_reward, step_input, trajectories
from polo.core.agent_primitives import group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


def counterfactual_gain(logp_obs: Tensor, logp_cf: Tensor, mask: Tensor) -> Tensor:
    """``IG = (1/n) Σ_k mask_k·(logp_obs_k − logp_cf_k)``, ``[*]`` from ``[*, n]`` inputs: the mean log-likelihood
    ratio of the next action's tokens with the real observation in context versus a placeholder in its place
    (``mask`` marks the next action's tokens, n their number). A row with no marked token gives 0."""
    if logp_obs.shape != logp_cf.shape:
        raise ValueError(f"counterfactual_gain: logp_obs {tuple(logp_obs.shape)} and logp_cf "
                         f"{tuple(logp_cf.shape)} must have one shape")
    m = torch.broadcast_to(mask, logp_obs.shape).to(logp_obs.dtype)
    diff = torch.where(m > 0, logp_obs - logp_cf, 0.0)
    return (diff * m).sum(-1) / m.sum(-1).clamp_min(1)


def _std_u(x: Tensor) -> Tensor:
    """Unbiased std of a flat tensor; 0 when it has fewer than two values."""
    return x.std() if x.numel() > 1 else x.new_zeros(())


@ADVANTAGES.register("infopo")
class InfoPO(AdvantageEstimator):
    """``A = A^out + β·gate_g·m·Â^I`` on every response token (``use_intrinsic_only``: ``A = m·Â^I``).

    Outcome: ``S_i`` = the episode return (``batch.scalar_reward()``, the sum of the turn rewards, rounded to
    4 decimals) and ``A^out_i = (S_i − mean_g S)/(std_u,g S + eps)`` over the trajectories of task group g
    (one trajectory alone: mean 0, std 1), on every token of every row of trajectory i.

    Intrinsic: the ``info_gain`` input ``IG_t`` (how much turn t's observation changed the likelihood of the
    agent's next action, credited to the turn that elicited it; 0 on the last turn and on turns without an
    observation; see ``counterfactual_gain``) is spread evenly over the row's n_t response tokens,
    ``x = IG_t/n_t`` each. Per group, over the trainable tokens whose ``x`` is non-zero:
    ``Â^I = (x − μ^I)/(σ^I + eps)`` with mean and ``std_u`` (one such token: μ = x, σ = 1, so 0); tokens with
    ``x = 0`` keep 0 (``normalize_intrinsic: false`` keeps the raw ``x``).

    Fusion, over all trainable tokens of the batch: ``σ_out = std_u(A^out) + eps``, ``σ_int = std_u(Â^I) +
    eps``, ``m = min(1, max(σ_out, 1)/σ_int)`` (which only ever shrinks the intrinsic term); per group
    ``gate_g = sigmoid(−σ_g/T_gate)`` with ``σ_g`` = ``std_u`` of the group's outcomes (1 for one
    trajectory), so the intrinsic term carries the signal when outcomes agree and fades when they differ;
    ``β = intrinsic_weight``. The authors' config decays β as ``β_0·exp(−decay·epoch)`` with decay 0; the
    decay is omitted here (β is constant). Defaults (β 0.5, T_gate 0.5) are the shipped config's, not the
    function's (0.1, 0.05). Formulas follow the authors' code with its default turn credits (equal for every
    turn) and summed trajectory scores, under which the outcome advantage is the same on every token; its
    other credit schemes are not provided. Vectorized; no loop. Diagnostics: ``infopo/gate_mean`` (over trajectories), ``infopo/magnitude_ratio`` (m) and
    ``infopo/intrinsic_abs_mean`` (|Â^I| over trainable tokens).

    Paper: "InfoPO: Information-Driven Policy Optimization for User-Centric Agents" (arXiv:2603.00656).
    """

    paper = "InfoPO: Information-Driven Policy Optimization for User-Centric Agents (arXiv:2603.00656)"
    provenance = "CODE"
    requires: ClassVar[frozenset[str]] = frozenset({"traj", "step", "info_gain"})

    intrinsic_weight: float = Field(default=0.5, ge=0)
    """β: weight of the gated intrinsic advantage (the shipped config's 0.5)."""
    gate_temperature: float = Field(default=0.5, gt=0)
    """T_gate of the variance gate sigmoid(−σ_g/T_gate) (the shipped config's 0.5)."""
    normalize_intrinsic: bool = True
    """Normalize the non-zero token intrinsic values per group (False: use them raw)."""
    use_intrinsic_only: bool = False
    """Ablation: drop the outcome advantage and the gate, A = m·Â^I."""
    eps: float = Field(default=1e-6, gt=0)
    """Added to every std before dividing."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        who = "advantage infopo"
        reward = episode_reward(batch, who)
        traj, step = step_input(batch, "traj", who), step_input(batch, "step", who)
        info_gain = step_input(batch, "info_gain", who).to(reward)
        group = batch.group
        inv, _, _ = trajectories(traj, group, who, step)
        N = len(reward)

        # Outcome: one statistics member per trajectory (its step-0 row), valued at its rows' mean return.
        score = torch.round(group_moments(reward, inv, singleton="self_mean")[0], decimals=4)
        first = step.long() == 0
        out_mean, out_std, _ = group_moments(score, group, first)
        a_out = (score - out_mean) / (out_std + self.eps)  # [N]
        gate = torch.sigmoid(-out_std / self.gate_temperature)  # σ_g = 1 for a one-trajectory group

        # Intrinsic: IG_t spread over the row's trainable tokens; statistics over the non-zero ones per group.
        trainable = mask > 0
        n_tok = trainable.sum(-1)
        x = torch.where(trainable, (info_gain / n_tok.clamp_min(1))[:, None], 0.0)
        if self.normalize_intrinsic:
            member = trainable & (x != 0)
            tok_group = group[:, None].expand_as(x).reshape(-1)
            mu, sigma, _ = group_moments(x.reshape(-1), tok_group, member.reshape(-1), singleton="self_mean")
            a_int = torch.where(member, (x - mu.view_as(x)) / (sigma.view_as(x) + self.eps), 0.0)
        else:
            a_int = x

        a_out_tok = a_out[:, None].expand_as(x)
        sigma_out = _std_u(a_out_tok[trainable]) + self.eps
        sigma_int = _std_u(a_int[trainable]) + self.eps
        ratio = torch.clamp(torch.clamp(sigma_out, min=1.0) / sigma_int, max=1.0)
        if self.use_intrinsic_only:
            adv = ratio * a_int
        else:
            adv = a_out_tok + self.intrinsic_weight * gate[:, None] * ratio * a_int
        n_int = trainable.sum()
        diagnostics = {
            "infopo/gate_mean": float(gate[first].mean()) if N else 0.0,
            "infopo/magnitude_ratio": float(ratio),
            "infopo/intrinsic_abs_mean": float(a_int[trainable].abs().sum() / n_int) if int(n_int) else 0.0,
        }
        return AdvantageResult(adv * mask, diagnostics=diagnostics)
