"""PRIME: leave-one-out baselines of the outcome reward and of the implicit process rewards, summed into
returns-to-go and whitened over the batch."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats, masked_mean, masked_whiten

NORM_EPS = 1e-6
"""Added to the largest process return before dividing by it (``normalize_process``)."""


def leave_one_out(x: Tensor, means: Tensor, group: Tensor) -> Tensor:
    """``K/(K−1)·(x − mean_g means)``: each row of ``x`` (``[B]`` or ``[B,T]``) less its group's mean of the
    per-row ``means`` ``[B]``, scaled by K/(K−1) (K the group's size). With ``x = means`` this is RLOO,
    ``x_i − mean_{j≠i} x_j``; a group of one keeps ``x``."""
    mean, _, count = group_stats(means, group)
    scale = count / (count - 1).clamp_min(1)
    if x.dim() == 2:
        mean, scale = mean[:, None], scale[:, None]
    return scale * (x - mean)


def to_go(x: Tensor) -> Tensor:
    """``[B,T]`` the undiscounted sum of each row from t to its end, ``Σ_{s≥t} x_s``."""
    return x.flip(-1).cumsum(-1).flip(-1)


@ADVANTAGES.register("prime")
class PRIME(AdvantageEstimator):
    """Leave-one-out baselines off the outcome reward and, token by token, off the implicit process rewards,
    summed into returns-to-go (γ = 1) and whitened over the batch.

    For a group of K responses to one prompt, with R_i the outcome reward (the scalar reward) and r_{i,t} the
    implicit process rewards (input ``process_rewards``: β·log π_φ/π_ref under the implicit PRM):

    * outcome, RLOO: ``Â_i = K/(K−1)·(R_i − mean_g R) = R_i − mean_{j≠i} R_j``, on the response's last token;
    * process, the same map token by token, as the authors' code (``compute_rloo_advantage_return``) forms it:
      with ``m_i = mean_t r_{i,t}`` each response's mean process reward,
      ``r̃_{i,t} = K/(K−1)·(r_{i,t} − mean_g m) = r_{i,t} − mean_{j≠i} m_j − (m_i − r_{i,t})/(K−1)``. The paper
      describes the baseline as the other responses' averaged process rewards, ``mean_{j≠i} m_j``; the code's
      extra term sums to 0 over a response, so ``Σ_t r̃_{i,t} = n_i·(m_i − mean_{j≠i} m_j)`` (n_i its length);
    * returns (γ = 1) ``G_{i,t} = outcome_coef·Â_i + process_coef·Σ_{s≥t} r̃_{i,s}`` on the trained tokens;
    * advantages ``A = (G − μ)/sqrt(σ² + 1e-8)``, μ and σ² the mean and unbiased variance of G over every trained
      token of the batch (``whiten``; as the code's ``masked_whiten``), else ``A = G``.

    ``normalize_process`` first divides every r by ``max_{i,t} |Σ_{s≥t} r_{i,s}| + 1e-6`` (the code's default
    ``prime_norm: batch_norm``), so the largest process return has size 1 like a 0/1 outcome. A group of one
    keeps its rewards (no baseline), as ``rloo`` does; a batch with one trained token is not whitened.
    Non-finite rewards or process rewards are refused (ValueError).

    Of PRIME's two reference implementations polo follows the authors' code on which tokens are rewarded and
    verl's PRIME recipe on where the normalisation's epsilon goes. Every response token, the last included,
    keeps its process reward (the authors' code; verl's recipe zeroes the last token's, leaving it to the
    outcome). The epsilon 1e-6 is added to the largest process return of the β-scaled rewards
    ``r = β·log π_φ/π_ref`` (verl's recipe); the authors' code normalises the unscaled log-ratios, where β
    cancels, so theirs is ``q/(M_q + 1e-6)`` and polo's ``q/(M_q + 1e-6/β)`` (``M_q`` the largest
    ``|Σ_{s≥t} log π_φ/π_ref|``): equal to 2e-5/M_q relative at β = 0.05, i.e. apart only while the PRM has
    barely left the reference (M_q ≲ 1e-3). Logs ``prime/process_reward`` (the mean raw
    r_t per trained token) and ``prime/process_scale`` (the divisor of ``normalize_process``, 1 without it).
    """

    paper = "Process Reinforcement through Implicit Rewards (arXiv:2502.01456)"
    provenance = "CODE"
    requires = frozenset({"process_rewards"})

    outcome_coef: float = Field(5.0, ge=0)
    """Weight of the outcome term (PRIME's ``reward_gt_coef``)."""
    process_coef: float = Field(5.0, ge=0)
    """Weight of the process term (PRIME's ``reward_dpo_coef``)."""
    normalize_process: bool = True
    """Divide the process rewards by the batch's largest absolute process return (``prime_norm: batch_norm``)."""
    whiten: bool = True
    """Whiten the returns over the batch's trained tokens into advantages."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        process = batch.input("process_rewards")
        if process is None or process.shape != mask.shape:
            raise ValueError(f"prime needs the input 'process_rewards' {list(mask.shape)}, got "
                             f"{None if process is None else list(process.shape)}")
        process = torch.where(mask > 0, process.to(mask), 0.0)
        if not (torch.isfinite(reward).all() and torch.isfinite(process).all()):
            raise ValueError("prime: the outcome rewards or the process_rewards hold non-finite values")
        scale = float(to_go(process).abs().max()) + NORM_EPS if self.normalize_process and process.numel() else 1.0
        scaled = process / scale
        outcome = leave_one_out(reward, reward, batch.group)
        token = leave_one_out(scaled, masked_mean(scaled, mask, -1), batch.group) * mask
        returns = (self.outcome_coef * outcome[:, None] + self.process_coef * to_go(token)) * mask
        whiten = self.whiten and float(mask.sum()) > 1
        advantages = masked_whiten(returns, mask) * mask if whiten else returns
        diagnostics = {"prime/process_reward": float(masked_mean(process, mask)), "prime/process_scale": scale}
        return AdvantageResult(advantages, returns=returns, diagnostics=diagnostics)
