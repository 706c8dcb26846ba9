"""InfoPPO's information-time GAE: discount and trace decay per unit of policy entropy."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.gae import GAE
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


def information_density(entropy: Tensor, mask: Tensor) -> Tensor:
    """``ρ = clamp(H / max_{valid (i,t)} H, 0, 1)`` ``[B,T]`` (batch-level normalization), 0 where masked.

    H is the behaviour policy's next-token entropy; a batch whose valid entropies are all 0 gets ρ = 0.
    """
    h = entropy * mask
    h_max = h.max() if h.numel() else h.new_zeros(())
    return (h / h_max).clamp(0, 1) if h_max > 0 else torch.zeros_like(h)


@ADVANTAGES.register("info_gae")
class InfoGAE(GAE):
    """GAE in information time: ``ρ = information_density(entropy_old)``,
    ``δ_t = tok_r_t + γ^{ρ_t}·V_next − V_t``, ``A_t = δ_t + (γλ)^{ρ_t}·A_next`` (masked positions skipped);
    ``returns = A + V`` (critic target); ``adv = masked_whiten(A)`` when ``whiten``.

    A nearly certain token (ρ ≈ 0) advances the clock by almost nothing, so γ < 1 shortens the horizon
    without washing a terminal reward out over boilerplate tokens. RECONSTRUCTED FROM ABSTRACT: the abstract
    measures time by information density; entropy as that density, its batch-max normalization and the
    defaults γ = 0.999, λ = 1 are our reading.
    """

    paper = "Information-Time Proximal Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"values", "entropy_old"})

    gamma: float = 0.999
    lam: float = 1.0

    def discount_exponent(self, batch: RolloutBatch) -> Tensor:
        return information_density(batch.extras["entropy_old"].to(batch.mask), batch.mask)
