"""NGRPO: group z-score with virtual maximum-reward samples (spec §12)."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats


@ADVANTAGES.register("ngrpo")
class NGRPO(SequenceAdvantage):
    """Each group of G rewards is augmented with ``n_virtual`` untrained samples of reward ``r_max``:
    ``μ' = (G·μ + n_v·R_max)/(G + n_v)``,
    ``σ'² = ((G−1)σ² + G(μ − μ')² + n_v(R_max − μ')²)/(G + n_v − 1)`` (unbiased std of R_g ∪ {R_max}×n_v),
    ``A_i = (R_i − μ')/(σ' + eps)``; a singleton group keeps ``A = R``.

    All-wrong groups get negative advantages instead of zero; all-``r_max`` groups get zero.
    """

    spec = "single_turn_core.md §12"
    provenance = "CODE"

    r_max: float = 1.0
    n_virtual: int = Field(default=1, ge=0)
    eps: float = 1e-6

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        mean, std, count = group_stats(reward, group)
        n_v, n = self.n_virtual, count + self.n_virtual
        mean_v = (count * mean + n_v * self.r_max) / n
        sq_dev = (count - 1) * std**2 + count * (mean - mean_v) ** 2 + n_v * (self.r_max - mean_v) ** 2
        std_v = (sq_dev / (n - 1).clamp_min(1)).sqrt()
        return torch.where(count == 1, reward, (reward - mean_v) / (std_v + self.eps))
