"""Per-token estimators of KL(π‖π_ref) from samples of the rollout policy (spec §0.2)."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.registry import DIVERGENCES, Component


class Divergence(Component):
    """Per-token divergence estimate ``[B,T]`` from ``Δ = clamp(logp − ref_logp, −20, 20)``."""

    spec = "single_turn_core.md §0.2"
    requires = frozenset({"ref_logp"})

    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor:
        return self.estimate((logp - ref_logp).clamp(-20, 20))

    def estimate(self, delta: Tensor) -> Tensor:
        raise NotImplementedError


@DIVERGENCES.register("k1")
class K1(Divergence):
    """k1 = Δ (unbiased, high variance, can be negative)."""

    def estimate(self, delta: Tensor) -> Tensor:
        return delta


@DIVERGENCES.register("k2")
class K2(Divergence):
    """k2 = Δ²/2 (biased, low variance)."""

    def estimate(self, delta: Tensor) -> Tensor:
        return delta**2 / 2


@DIVERGENCES.register("k3")
class K3(Divergence):
    """k3 = exp(−Δ) − 1 + Δ (unbiased, non-negative; verl "low_var_kl")."""

    def estimate(self, delta: Tensor) -> Tensor:
        return torch.expm1(-delta) + delta


@DIVERGENCES.register("hellinger")
class Hellinger(Divergence):
    """``1 − exp(−Δ/2) = 1 − sqrt(π_ref/π)``: unbiased for the squared Hellinger distance
    ``H² = 1 − Σ_v sqrt(π(v)·π_ref(v))`` under samples of π (not non-negative per token; DGPO, spec §15)."""

    def estimate(self, delta: Tensor) -> Tensor:
        return -torch.expm1(-delta / 2)
