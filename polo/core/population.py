"""The math of outer loops that evolve what surrounds the policy: a population of candidates (INSPO's
instructions, Self-HPO's harnesses), scored from the rewards of the rollouts that used them.

INSPO ("Agentic Policy Optimization via Instruction-Policy Co-Evolution", arXiv:2512.01945; reconstructed
from its abstract, the numeric choices ours):

- attribution: ``s_j ← (1−α)·s_j + α·mean(R of the rollouts that used I_j this step)``, only for the
  instructions used this step, and ``n_j += #rollouts``; a candidate never attributed before (``n_j = 0``)
  takes the mean itself when ``first_sets`` (our choice: otherwise the starting value biases the early race);
- sampling: ``p_j ∝ exp(s_j / τ)``, a candidate never attributed counting as the best attributed one (ours:
  otherwise an instruction the first draws miss keeps its starting score and is never tried);
- pruning: the ``k`` lowest scores among the candidates with ``n_j ≥ n_min`` are removed, never leaving fewer
  than ``N_min``;
- admission: a verified candidate joins when its verification mean is ≥ the median of ``s``.

Self-HPO (harness-policy optimization for coding agents; reconstructed from its abstract, no arXiv id
recorded): the hard-task set is the tasks
whose group success rate is ≤ ``τ_hard`` (the hardest first, at most ``cap``), and a harness replaces the
current one only when strictly better.
"""
from __future__ import annotations

import torch
from torch import Tensor


def _finite(name: str, values: Tensor) -> None:
    if not torch.isfinite(values).all():
        raise ValueError(f"{name} must be finite, got {values.tolist()}")


def ema_scores(scores: Tensor, counts: Tensor, used: Tensor, rewards: Tensor, alpha: float,
               first_sets: bool = False) -> tuple[Tensor, Tensor]:
    """``(scores, counts)`` after one step's attribution. ``scores``/``counts`` ``[N]``; ``used`` ``[M]`` the
    candidate index of each rollout, ``rewards`` ``[M]`` its reward. ``s_j ← (1−α)s_j + α·mean_j`` where
    candidate j was used (``mean_j`` over its rollouts), unchanged elsewhere; ``n_j += #rollouts``. With
    ``first_sets`` a candidate with ``n_j = 0`` takes ``mean_j``."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if used.shape != rewards.shape or used.dim() != 1:
        raise ValueError(f"used {tuple(used.shape)} and rewards {tuple(rewards.shape)} must be equal 1-d shapes")
    if used.numel() and (int(used.min()) < 0 or int(used.max()) >= scores.numel()):
        raise ValueError(f"used holds indices outside 0..{scores.numel() - 1}: {used.tolist()}")
    _finite("rewards", rewards)
    scores = scores.double()
    n = torch.zeros_like(scores).index_add_(0, used, torch.ones_like(rewards, dtype=scores.dtype))
    mean = torch.zeros_like(scores).index_add_(0, used, rewards.to(scores)) / n.clamp(min=1)
    updated = (1 - alpha) * scores + alpha * mean
    if first_sets:
        updated = torch.where(counts == 0, mean, updated)
    return torch.where(n > 0, updated, scores), counts + n.to(counts.dtype)


def sampling_probs(scores: Tensor, tau: float, counts: Tensor | None = None) -> Tensor:
    """``p_j = exp(s_j/τ) / Σ_k exp(s_k/τ)``. With ``counts``, a candidate never attributed (``n_j = 0``) is
    sampled as if it had the best attributed score (optimism: it gets tried; none attributed: uniform)."""
    if not tau > 0:
        raise ValueError(f"the sampling temperature tau must be > 0, got {tau}")
    _finite("scores", scores)
    scores = scores.double()
    if counts is not None:
        tried = counts > 0
        best = scores[tried].max() if tried.any() else scores.new_zeros(())
        scores = torch.where(tried, scores, best)
    return torch.softmax(scores / tau, 0)


def prune_indices(scores: Tensor, counts: Tensor, k: int, n_min: int, keep_min: int) -> Tensor:
    """The indices to remove: the ``k`` lowest scores among candidates with ``counts ≥ n_min`` (ties: the
    earlier index first), fewer when that would leave under ``keep_min`` candidates. Sorted ascending."""
    if k < 0 or keep_min < 1:
        raise ValueError(f"prune needs k ≥ 0 and keep_min ≥ 1, got k={k}, keep_min={keep_min}")
    eligible = counts >= n_min
    take = max(0, min(k, scores.numel() - keep_min, int(eligible.sum())))
    keyed = torch.where(eligible, scores.double(), torch.full_like(scores, float("inf"), dtype=torch.float64))
    return torch.sort(torch.argsort(keyed, stable=True)[:take]).values


def admitted(candidate_means: Tensor, scores: Tensor) -> Tensor:
    """``[C]`` bool: a candidate's verification mean is ≥ the median of ``scores`` (the mean of the two middle
    values for an even count)."""
    _finite("candidate means", candidate_means)
    if scores.numel() == 0:
        return torch.ones_like(candidate_means, dtype=torch.bool)
    return candidate_means.double() >= torch.quantile(scores.double(), 0.5)


def hard_tasks(success: Tensor, tau_hard: float, cap: int) -> Tensor:
    """Indices of the tasks with success rate ≤ ``tau_hard``, lowest rate first (ties: earlier first), at most
    ``cap``."""
    _finite("success rates", success)
    order = torch.argsort(success.double(), stable=True)
    return order[success[order] <= tau_hard][:cap]


def strictly_better(current: float, candidates: Tensor) -> int:
    """The index of the best candidate when it beats ``current`` strictly, else −1 (keep the current one)."""
    _finite("candidate scores", candidates)
    if candidates.numel() == 0:
        return -1
    best = int(torch.argmax(candidates))
    return best if float(candidates[best]) > current else -1
