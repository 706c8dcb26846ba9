"""Rollout correction: importance weights between the rollout engine and the trainer's recompute."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.credit.base import TokenCredit
from polo.core.registry import CREDIT


@CREDIT.register("rollout_is")
class RolloutIS(TokenCredit):
    """Weights from ``log w_t = clamp(old_logp_t − rollout_logp_t, −20, 20)`` (old_logp: the trainer's
    recompute; rollout_logp: the engine's, ``extras["rollout_logp"]``), with cap C:

    * ``tis``: ``w_t = min(exp(log w_t), C)`` (truncated token IS);
    * ``seq_tis``: ``w_i = min(exp(clamp(Σ_t m·log w_t, −20, 20)), C)`` on every token of row i;
    * ``mask``: ``w_t = 1`` if ``exp(log w_t) ∈ [1/C, C]`` else 0 (token rejection sampling). Rejected tokens
      lose their advantage but still count in the aggregation denominator.

    Multiplying the advantage by w ≥ 0 equals weighting the clipped PPO token loss by w. Logged each step
    (``diagnostics``): the weights' mean/min/max/zero fraction and the ``mismatch/*`` statistics of the gap.
    verl rollout correction (``verl/trainer/ppo/rollout_corr_helper.py``: token / sequence truncate, mask
    with lower bound 1/upper). The inference engine and the trainer compute slightly different probabilities
    for the same tokens, so even "on-policy" data is off-policy; importance weights correct for it.
    """

    paper = ("When Speed Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch "
             "(Liu, Li et al. 2025, a blog post; arXiv id not found)")

    provenance = "CODE"
    requires = frozenset({"old_logp", "rollout_logp"})
    corrects_stale_samples = True

    mode: Literal["tis", "seq_tis", "mask"] = "tis"
    cap: float = Field(default=2.0, gt=1)

    def __call__(self, batch: RolloutBatch) -> Tensor:
        mask = batch.mask
        log_w = (batch.old_logp - batch.extras["rollout_logp"].to(mask)).clamp(-20, 20) * mask
        if self.mode == "seq_tis":
            log_w = log_w.sum(-1, keepdim=True).clamp(-20, 20).expand_as(mask)
        w = log_w.exp()
        if self.mode == "mask":
            return ((w >= 1 / self.cap) & (w <= self.cap)).to(mask) * mask
        return w.clamp(max=self.cap) * mask

    def diagnostics(self, batch: RolloutBatch, weights: Tensor) -> dict[str, float]:
        """The weights' statistics, the trainer-vs-rollout gap (``importance_metrics`` under ``mismatch/``) and
        the mean |π_train − π_rollout| of the sampled tokens' probabilities."""
        mask = batch.mask.bool()
        rollout = batch.extras["rollout_logp"].to(batch.old_logp)
        row = {**super().diagnostics(batch, weights), **importance_metrics(batch.old_logp - rollout, mask, "mismatch")}
        gap = (batch.old_logp.exp() - rollout.exp()).abs() * mask
        row["mismatch/prob_diff_mean"] = float(gap.sum() / mask.sum().clamp_min(1))
        return row


def importance_metrics(log_w: Tensor, mask: Tensor, prefix: str) -> dict[str, float]:
    """Diagnostics of token importance ratios ``w = exp(log_w)`` (``log_w = log π_train − log π_behaviour``) over
    the masked tokens: ``k1 = mean(−log w)`` and ``k3 = mean(w − 1 − log w)`` (two estimates of
    KL(behaviour ‖ train)), the mean and largest |log w|, and the normalized effective sample size
    ``(Σw)² / (n·Σw²)`` (1: no mismatch)."""
    m = mask.bool()
    n = m.sum().clamp_min(1)
    log_w = log_w.float().clamp(-20, 20).masked_fill(~m, 0.0)
    w = log_w.exp().masked_fill(~m, 0.0)
    return {f"{prefix}/k1": float(-log_w.sum() / n), f"{prefix}/k3": float(((w - 1 - log_w) * m).sum() / n),
            f"{prefix}/abs_log_ratio_mean": float(log_w.abs().sum() / n),
            f"{prefix}/abs_log_ratio_max": float(log_w.abs().max()) if m.any() else 0.0,
            f"{prefix}/ess": float(w.sum() ** 2 / (n * (w**2).sum()).clamp_min(1e-12))}
