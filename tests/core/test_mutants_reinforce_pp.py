"""Mutation-testing kills for REINFORCE++ (polo/core/advantages/reinforce_pp.py)."""
import torch

from polo.core.advantages.reinforce_pp import ReinforcePP

from .helpers import build_batch, close


def test_call_uses_the_trainers_kl_coef():
    # one token per row; k1 = old − ref = 0, 0.5, 0; β = 0.5 → token rewards 1, −0.25, 0
    batch = build_batch([1.0, 0.0, 0.0], old_logp=[[-1.0], [-1.0], [-1.0]], ref_logp=[[-1.0], [-1.5], [-1.0]])
    adv = ReinforcePP(kl_coef=0.0)(batch, kl_coef=0.5).advantages[:, 0]
    # whitened over the batch: mean 0.25, deviations 0.75, −0.5, −0.25, unbiased var 0.875/2 = 0.4375
    close(adv, torch.tensor([0.75, -0.5, -0.25], dtype=torch.float64) / 0.4375**0.5)
