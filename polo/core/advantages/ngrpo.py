"""NGRPO: group z-score with virtual maximum-reward samples."""
from __future__ import annotations

import math

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("ngrpo")
class NGRPO(AdvantageEstimator):
    """Each group of G rewards (mean μ, unbiased std σ) is augmented with ``n_virtual`` = n_v untrained
    samples of reward R_max:
    ``μ' = (G·μ + n_v·R_max)/(G + n_v)``,
    ``σ'² = ((G−1)σ² + G(μ − μ')² + n_v(R_max − μ')²)/(G + n_v − 1)`` (the unbiased variance of
    R_g ∪ {R_max}×n_v), ``A_i = (R_i − μ')/(σ' + eps)``; a singleton group keeps ``A = R``.

    R_max = ``r_max`` when set, else the largest value the scalar reward can take,
    ``R_max = Σ_k w_k·reward_max_k`` (``batch.reward_weights``, ``batch.reward_max``; components of weight 0
    are ignored). That needs every weighted component bounded and every weight ≥ 0, else a ValueError asks
    for ``advantage.r_max``.

    All-wrong groups get negative advantages instead of zero (the virtual sample beats them all); all-R_max
    groups get zero. The paper pairs this with an asymmetric clip (``ppo_clip`` with clip_low < clip_high).
    Logs the share of rows in groups of equal rewards (``ngrpo/flat_rows``: no signal under GRPO) and of those
    that still get a non-zero advantage here (``ngrpo/flat_rows_learning``).
    """

    paper = "NGRPO: Negative-enhanced Group Relative Policy Optimization (arXiv:2509.18851)"
    provenance = "CODE"

    r_max: float | None = None
    """R_max of the virtual samples; None: the maximum of the scalar reward, Σ_k w_k·reward_max_k."""
    n_virtual: int = Field(default=1, ge=0)
    eps: float = 1e-6

    def max_reward(self, batch: RolloutBatch) -> float:
        """``r_max`` if set, else ``Σ_k w_k·reward_max_k`` over the components with ``w_k ≠ 0``."""
        if self.r_max is not None:
            return self.r_max
        weights, top = batch.reward_weights.double().cpu(), batch.reward_max.double().cpu()
        names = batch.reward_names
        negative = [names[k] for k in torch.nonzero(weights < 0).flatten().tolist()]
        if negative:
            raise ValueError(
                f"ngrpo: the maximum of the scalar reward is unknown because reward component(s) "
                f"{', '.join(negative)} have negative weight; set advantage.r_max to the largest scalar reward"
            )
        terms = torch.where(weights == 0, 0.0, weights * top)
        unbounded = [names[k] for k in torch.nonzero(~torch.isfinite(terms)).flatten().tolist()]
        if unbounded:
            raise ValueError(
                f"ngrpo: the maximum of the scalar reward is unknown because reward component(s) "
                f"{', '.join(unbounded)} declare no finite maximum (reward_max = inf); set advantage.r_max to "
                f"the largest scalar reward"
            )
        return float(terms.sum())

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        adv = self.calibrated(reward, batch.group, self.max_reward(batch))
        _, std, count = group_stats(reward, batch.group)
        flat = (std == 0) & (count > 1)  # groups plain GRPO gives no signal
        learns = flat & (adv != 0)
        return AdvantageResult(adv[:, None] * mask, diagnostics={
            "ngrpo/flat_rows": float(flat.float().mean()),
            "ngrpo/flat_rows_learning": float(learns.float().mean())})

    def calibrated(self, reward: Tensor, group: Tensor, r_max: float) -> Tensor:
        """``A`` ``[B]`` for rewards ``[B]`` in groups, with ``n_virtual`` samples of reward ``r_max``."""
        if not math.isfinite(r_max):
            raise ValueError(f"ngrpo: advantage.r_max must be finite, got {r_max}")
        mean, std, count = group_stats(reward, group)
        n_v, n = self.n_virtual, count + self.n_virtual
        mean_v = (count * mean + n_v * r_max) / n
        sq_dev = (count - 1) * std**2 + count * (mean - mean_v) ** 2 + n_v * (r_max - mean_v) ** 2
        std_v = (sq_dev / (n - 1).clamp_min(1)).sqrt()
        return torch.where(count == 1, reward, (reward - mean_v) / (std_v + self.eps))
