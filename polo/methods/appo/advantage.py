"""APPO (agentic procedural policy optimization): where to branch a rollout (the branching score, pure tensor
functions an engine calls at rollout time) and how to credit the rollouts after branching (the ``appo``
estimator on step rows: an outcome z-score against the initial rollouts plus a scaled branch-group z-score)."""
from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.advantages.episode_terms import trajectory_mean
from polo.core.advantages.step_inputs import constant_per, episode_reward, step_input, trajectories
from polo.core.agent_primitives import group_moments, group_norm
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import segment_sum

APPO_INPUTS = ("traj", "step", "branch", "branch_token", "branch_scale", "branch_entropy")
GAIN_FLOOR = 1e-3
"""Nats: a trajectory whose future likelihood gain Ω spans less than this has not moved from the reference. While
the policy is its reference (the first step) Ω is the float32 difference between the sampler's and a forward
pass's log-probs (measured ~2e-6 on KBLookup); one update later it spans 0.03 to 0.3 or more."""


def future_likelihood_gain(lam: Tensor, window: int, gamma: float) -> Tensor:
    """``Ω_k = Σ_{j=k+1}^{min(k+W, L−1)} γ^{j−k−1}·λ_j`` over the last dimension of ``lam`` (``[..., L]`` →
    ``[..., L]``; ``Ω_{L−1} = 0``), ``λ_j`` the log-ratio of the trained to the reference policy at token j.

    Vectorized: ``λ`` shifted left by one and zero-padded by W, its length-W windows (``unfold``) times the
    discount vector ``γ^0..γ^{W−1}``; O(L·W), no loop over k."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"future_likelihood_gain: window must be an integer ≥ 0, got {window!r}")
    if not lam.is_floating_point() or lam.dim() < 1:
        raise ValueError(f"future_likelihood_gain: lam must be a floating-point tensor [..., L], got "
                         f"{lam.dtype} of shape {tuple(lam.shape)}")
    L = lam.shape[-1]
    if window == 0 or L == 0:
        return torch.zeros_like(lam)
    padded = torch.cat([lam[..., 1:], lam.new_zeros((*lam.shape[:-1], window))], -1)  # λ_{k+1}, …, then 0s
    windows = padded.unfold(-1, window, 1)  # [..., L, W]: λ_{k+1..k+W}
    discount = torch.tensor(float(gamma), dtype=torch.float64) ** torch.arange(window, dtype=torch.float64)
    return windows @ discount.to(lam)


def _min_max(x: Tensor, eps: float) -> Tensor:
    """``(x − min)/(max − min + eps)`` over the last dimension."""
    if x.shape[-1] == 0:
        return x.clone()
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    return (x - lo) / (hi - lo + eps)


def branch_scores(entropy: Tensor, lam: Tensor, window: int, gamma: float,
                  eps: float = 1e-6) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """APPO's branching score of a trajectory's candidate tokens: ``(Ω, Ĥ, Ω̂, BS)``, each shaped like ``entropy``.

    ``entropy`` and ``lam`` are ``[..., L]`` over the trajectory's generated (trainable) tokens in order (the
    caller drops observation and tool-output tokens first): ``Ω = future_likelihood_gain(lam, window, gamma)``,
    ``Ĥ`` and ``Ω̂`` the min-max normalizations ``(x − min)/(max − min + eps)`` over the last dimension, and
    ``BS = Ĥ·Ω̂``. Where Ω spans less than ``GAIN_FLOOR`` (the policy has not moved from its reference: the
    first step, when the reference is the policy), min-max would blow float noise up to [0, 1] and pick a
    random token; there ``Ω̂ = 0`` (no procedure scaling) and ``BS = Ĥ``: entropy alone ranks the positions
    until the gain has something to say (our choice). ValueError on mismatched shapes or non-finite values."""
    if entropy.shape != lam.shape:
        raise ValueError(f"branch_scores: entropy and lam must have one shape, got {tuple(entropy.shape)} and "
                         f"{tuple(lam.shape)}")
    for name, x in (("entropy", entropy), ("lam", lam)):
        if not x.is_floating_point() or not bool(torch.isfinite(x).all()):
            raise ValueError(f"branch_scores: {name} must be finite floating point")
    omega = future_likelihood_gain(lam, window, gamma)
    h_hat = _min_max(entropy, eps)
    if omega.shape[-1] == 0:
        return omega, h_hat, omega.clone(), h_hat.clone()
    moved = omega.amax(-1, keepdim=True) - omega.amin(-1, keepdim=True) >= GAIN_FLOOR
    omega_hat = torch.where(moved, _min_max(omega, eps), 0.0)
    return omega, h_hat, omega_hat, h_hat * torch.where(moved, omega_hat, 1.0)


def select_branch_points(bs: Tensor, k: int, min_gap: int) -> list[int]:
    """Up to ``k`` branch positions of a ``[L]`` branching score, in the order chosen (highest score first).

    Greedy: the best remaining score wins, ties going to the earlier position (``argmax`` returns the first
    maximum); then every position closer than ``min_gap`` tokens to it (and the position itself) is ruled out.
    Fewer than ``k`` come back when the gap rules out the rest. A Python loop over the k picks (a handful),
    each pick vectorized over positions."""
    if bs.dim() != 1:
        raise ValueError(f"select_branch_points: bs must be [L], got shape {tuple(bs.shape)}")
    if not bool(torch.isfinite(bs).all()):
        raise ValueError("select_branch_points: bs holds non-finite values")
    if k < 0 or min_gap < 0:
        raise ValueError(f"select_branch_points: k and min_gap must be ≥ 0, got {k} and {min_gap}")
    score = bs.double().clone()
    pos = torch.arange(len(bs), device=bs.device)
    allowed = torch.ones(len(bs), dtype=torch.bool, device=bs.device)
    points: list[int] = []
    for _ in range(k):
        if not bool(allowed.any()):
            break
        b = int(torch.where(allowed, score, -torch.inf).argmax())
        points.append(b)
        allowed &= (pos - b).abs() >= max(min_gap, 1)
    return points


def procedure_scale(omega_hat: Tensor, points: list[int], alpha: float) -> Tensor:
    """``s_b = 1 + alpha·Ω̂_b`` for each branch point b (the ``branch_scale`` input the engine writes)."""
    return 1 + alpha * omega_hat[torch.as_tensor(points, dtype=torch.long, device=omega_hat.device)]


@ADVANTAGES.register("appo")
class APPO(AdvantageEstimator):
    """Outcome credit against the initial rollouts plus a scaled branch-group credit after each branch point.

    Rollout side (the engine's; ``branch_scores``, ``select_branch_points``, ``procedure_scale`` here): over a
    trajectory's generated tokens, with entropy ``H_k`` and ``λ_j = log π_θ(y_j) − log π_ref(y_j)``, the future
    likelihood gain is ``Ω_k = Σ_{j=k+1}^{min(k+W, L−1)} γ^{j−k−1} λ_j``; the branching score
    ``BS_k = Ĥ_k·Ω̂_k`` multiplies the min-max normalized entropy and gain, so a branch needs both an uncertain
    token and a continuation the training has moved. The top-scoring positions b (ties → earlier, at least
    ``min_gap`` apart) each get M continuations re-sampled from token b+1 on (children, ``batch.parent`` = the
    branched trajectory's ``traj``), and the branch point's scale is ``s_b = 1 + alpha·Ω̂_b`` (``alpha`` is the
    brancher's setting, ``engine.tree.alpha``: the estimator reads the scale the engine wrote). While the policy
    is its reference (step 1), Ω is 0 and the entropy alone picks b (``branch_scores``).

    Credit, on step rows (one per turn; a child's rows start at its branched turn, its copied prefix tokens
    masked). Per trajectory x with episode reward ``R_x``, in task group g (``batch.group``):

    * ``A^out_x = (R_x − mean_g)/(std_u,g + eps)`` with the statistics over the ROOT trajectories of g
      (``batch.parent = −1``), one value per trajectory; children are scored against the same statistics. A
      group with one root (or none) uses mean 0, std 1, as GRPO does.
    * For the branch group β (the branched trajectory and its children, the trajectories whose rows carry
      ``branch = β``): ``A^br_x = (R_x − mean_β R)/(std_u,β R + eps)``, one value per trajectory; all equal, or
      a one-trajectory group, gives 0.
    * Token advantage: ``A^out_x`` on every response token, plus ``s_β·A^br_x`` on the tokens at columns
      ``≥ branch_token`` of the rows carrying ``branch = β`` (so on the branched trajectory only after b, and
      on every trainable token of a child). Zero where the response mask is 0.

    One branch point per trajectory: a row carries one branch id, so the spec's default of K = 2 points per
    trajectory (and branching a child again) would need one branch id per point and is not supported; the
    engine uses K = 1. The rows of a trajectory may come in any order; ``step`` must be contiguous per
    trajectory and start at 0 on roots (a child starts at its branched turn). Vectorized over rows and
    trajectories (no Python loop). Our design choices (the method was read from third-party summaries): the
    reference policy in λ, min-max normalization, the window, adding the two terms per token, K, M and alpha.
    Inputs: ``traj``, ``step``, ``branch``, ``branch_token`` (``[N]`` long), ``branch_scale`` and
    ``branch_entropy`` (``[N]`` float), described in ``step_inputs.STEP_INPUTS``; ``batch.parent`` (parent
    trajectory id, −1 for roots). Diagnostics: ``appo/branch_groups`` (count), ``appo/branch_adv_abs_mean`` (mean
    ``|A^br|`` over their trajectories), ``appo/branch_entropy_ratio`` (mean over branch points of the chosen
    token's sampling entropy over its episode's mean: above 1 when the score picks uncertain tokens) and
    ``appo/branch_scale_mean`` (mean ``s_b``: above 1 once the policy has moved from its reference).
    Paper: Agentic Procedural Policy Optimization (arXiv:2606.12384).
    """

    paper = "Agentic Procedural Policy Optimization (arXiv:2606.12384)"
    provenance = "SECONDARY"
    requires: ClassVar[frozenset[str]] = frozenset(APPO_INPUTS)

    eps: float = Field(default=1e-6, gt=0)
    """Added to the unbiased std of both z-scores."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        who = "advantage appo"
        mask = batch.mask
        N, T = mask.shape
        reward = episode_reward(batch, who)
        traj, step = step_input(batch, "traj", who), step_input(batch, "step", who)
        branch = step_input(batch, "branch", who).long()
        token = step_input(batch, "branch_token", who).long()
        scale = step_input(batch, "branch_scale", who).to(reward)
        entropy_ratio = step_input(batch, "branch_entropy", who).to(reward)
        parent = batch.parent
        if parent is None or parent.shape != (N,) or parent.is_floating_point() or parent.dtype == torch.bool:
            raise ValueError(f"{who} needs batch.parent [{N}] (the parent trajectory id of each row, -1 for roots) "
                             "as an integer tensor")
        parent = parent.long()
        group = batch.group
        tinv, n_traj, traj_group = trajectories(traj, group, who)
        if not n_traj:
            return AdvantageResult(mask.clone(), diagnostics={"appo/branch_groups": 0.0,
                                                               "appo/branch_adv_abs_mean": 0.0,
                                                               "appo/branch_entropy_ratio": 0.0,
                                                               "appo/branch_scale_mean": 0.0})

        # Step rows: contiguous per trajectory, from 0 on roots (a child starts at its branched turn).
        step = step.long()
        count = segment_sum(torch.ones_like(step), tinv, n_traj)
        first = step.new_full((n_traj,), torch.iinfo(torch.long).max).scatter_reduce(0, tinv, step, "amin")
        last = step.new_full((n_traj,), -1).scatter_reduce(0, tinv, step, "amax")
        pairs = torch.unique(tinv * (int(step.max()) + 1) + step).numel() if int(step.min()) >= 0 else -1
        if pairs != N or not bool((last - first + 1 == count).all()):
            raise ValueError(f"{who}: each trajectory's step rows must carry distinct, contiguous turn indices ≥ 0")

        # Tree: parent constant per trajectory, -1 or the traj id of a trajectory of the same task group.
        if not bool(constant_per(parent, tinv, n_traj).all()):
            raise ValueError(f"{who}: batch.parent must be the same on every row of a trajectory")
        t_parent = parent.new_zeros(n_traj).scatter_reduce(0, tinv, parent, "amax", include_self=False)
        root = t_parent == -1
        if bool((t_parent < -1).any()):
            raise ValueError(f"{who}: batch.parent must be -1 (a root) or a parent trajectory id")
        ids = traj.long().new_zeros(n_traj).scatter_reduce(0, tinv, traj.long(), "amax", include_self=False)
        sorted_ids, order = ids.sort()
        child = ~root
        at = torch.searchsorted(sorted_ids, t_parent[child]).clamp_max(n_traj - 1)
        if not bool((sorted_ids[at] == t_parent[child]).all()):
            raise ValueError(f"{who}: a branch child's batch.parent names a trajectory that is not in the batch")
        if not bool((traj_group[order[at]] == traj_group[child]).all()):
            raise ValueError(f"{who}: a branch child must share its parent's task group (batch.group)")
        if bool((first[root] != 0).any()):
            raise ValueError(f"{who}: a root trajectory's step rows must start at turn 0")

        # Branch groups: at most one per trajectory, inside one task group, one scale each, tokens in [0, T].
        if bool((branch < -1).any()):
            raise ValueError(f"{who}: the step-row input 'branch' must be -1 or a branch-group id ≥ 0")
        if bool(((token < 0) | (token > T)).any()):
            raise ValueError(f"{who}: the step-row input 'branch_token' must lie in [0, {T}] (a response column)")
        in_branch = branch >= 0
        t_branch = branch.new_full((n_traj,), -1).scatter_reduce(0, tinv, branch, "amax")
        if bool((in_branch & (branch != t_branch[tinv])).any()):
            raise ValueError(f"{who}: a trajectory's rows carry several branch ids; one branch point per trajectory "
                             "is supported (K = 1)")
        a_br_t = reward.new_zeros(n_traj)
        n_groups = 0
        if bool(in_branch.any()):
            _, binv = torch.unique(branch[in_branch], return_inverse=True)
            n_groups = int(binv.max()) + 1
            if not bool(constant_per(scale[in_branch], binv, n_groups).all()):
                raise ValueError(f"{who}: the step-row input 'branch_scale' must be the same on every row of a "
                                 "branch group (one s_b per branch point)")
            if not bool(constant_per(group[in_branch], binv, n_groups).all()):
                raise ValueError(f"{who}: a branch group spans several task groups (batch.group)")
            if bool((segment_sum((token[in_branch] > 0).long(), binv, n_groups) > 1).any()):
                raise ValueError(f"{who}: a branch group has several rows with branch_token > 0; only the branched "
                                 "trajectory's branched-turn row starts after column 0")

        traj_reward = trajectory_mean(reward, tinv, n_traj)
        mean, std, _ = group_moments(traj_reward, traj_group, members=root)
        a_out_t = (traj_reward - mean) / (std + self.eps)
        members = t_branch >= 0
        if n_groups:
            a_br_t[members] = group_norm(traj_reward[members], t_branch[members], "mean_std", singleton="self_mean",
                                         eps=self.eps)
        cols = torch.arange(T, device=mask.device)
        cover = in_branch[:, None] & (cols[None, :] >= token[:, None])
        bonus = torch.where(in_branch, scale * a_br_t[tinv], 0.0)
        adv = (a_out_t[tinv][:, None] + cover.to(reward) * bonus[:, None]) * mask
        def per_point(x: Tensor) -> float:
            """The mean over branch points of a value every row of a branch group carries."""
            if not n_groups:
                return 0.0
            return float((segment_sum(x[in_branch], binv, n_groups) / segment_sum(torch.ones_like(x[in_branch]), binv,
                                                                                 n_groups)).mean())

        diagnostics = {
            "appo/branch_groups": float(n_groups),
            "appo/branch_adv_abs_mean": float(a_br_t[members].abs().mean()) if n_groups else 0.0,
            "appo/branch_entropy_ratio": per_point(entropy_ratio),
            "appo/branch_scale_mean": per_point(scale),
        }
        return AdvantageResult(adv, diagnostics=diagnostics)
