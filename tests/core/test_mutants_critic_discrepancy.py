"""Mutation-testing kills for ReDiPPO's critic-discrepancy token credit (polo/core/credit/critic_discrepancy.py)."""
import torch

from polo.core.credit.critic_discrepancy import CriticDiscrepancy

from .helpers import build_batch, close


def two_token_batch(gap):
    b = build_batch([0.0], mask=torch.ones(1, 2), values=torch.zeros(1, 2))
    b.extras["values_privileged"] = torch.tensor([gap], dtype=torch.float64)
    return b


def test_eps_is_added_to_a_spread_smaller_than_itself():
    # e = [1e-7, 3e-7]: μ = 2e-7, σ = 1e-7 (population); w = 1 + (e − μ)/(σ + 1e-6) = 1 ∓ 1e-7/1.1e-6 = 1 ∓ 1/11
    w = CriticDiscrepancy()(two_token_batch([1e-7, 3e-7]))
    torch.testing.assert_close(w, torch.tensor([[1 - 1 / 11, 1 + 1 / 11]], dtype=torch.float64), rtol=0, atol=1e-9)


def test_weights_take_the_masks_dtype():
    b = two_token_batch([0.0, 2.0])
    b.rewards = b.rewards.float()  # mask float32; both critics' values float64
    w = CriticDiscrepancy()(b)
    # e = [0, 2]: μ = 1, σ = 1, w = 1 ± 1/(1 + 1e-6) → [0.5 (clamped), ≈ 2]
    assert w.dtype == torch.float32
    close(w, [[0.5, 2.0]])
