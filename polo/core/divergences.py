"""Per-token estimators of KL(π‖π_ref) from samples of the rollout policy.

With ``Δ = log π(y_t) − log π_ref(y_t)`` at a sampled token, k1 = Δ, k2 = Δ²/2 and k3 = e^{−Δ} − 1 + Δ are the
three estimators of J. Schulman's note "Approximating KL Divergence" (2020, a blog post, not on arXiv):
k1 and k3 are unbiased for KL(π‖π_ref), k2 is biased but low-variance, k3 is also never negative.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.registry import DIVERGENCES, Component


class Divergence(Component):
    """Per-token divergence estimate ``[B,T]`` from ``Δ = clamp(logp − ref_logp, −20, 20)``."""

    paper = "Approximating KL Divergence (J. Schulman, 2020 blog post; not an arXiv paper, no arXiv id)"
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
    """k3 = exp(−Δ) − 1 + Δ (unbiased, non-negative; verl "low_var_kl"): GRPO's KL penalty."""

    paper = ("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models "
             "(arXiv:2402.03300)")

    def estimate(self, delta: Tensor) -> Tensor:
        return torch.expm1(-delta) + delta


@DIVERGENCES.register("hellinger")
class Hellinger(Divergence):
    """``1 − exp(−Δ/2) = 1 − sqrt(π_ref/π)``: unbiased for the squared Hellinger distance
    ``H² = 1 − Σ_v sqrt(π(v)·π_ref(v))`` under samples of π, since ``E_π[sqrt(π_ref/π)] = Σ_v sqrt(π·π_ref)``
    (not non-negative per token). DGPO bounds the deviation from the reference with H² instead of the KL."""

    paper = "DGPO: Distribution Guided Policy Optimization for Fine Grained Credit Assignment (arXiv:2605.03327)"

    def estimate(self, delta: Tensor) -> Tensor:
        return -torch.expm1(-delta / 2)
