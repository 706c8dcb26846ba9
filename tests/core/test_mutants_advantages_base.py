"""Mutation-testing kills for the shared token rewards of polo/core/advantages/base.py (TokenRewardAdvantage)."""
import torch

from polo.core.advantages.gae import GAE

from .helpers import build_batch, close


def kl_batch():
    # k1 = old − ref = 0.5 on the valid tokens; padding holds 0 for both log-probs
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    return build_batch([1.0, 2.0], mask=mask, old_logp=-1.0 * mask, ref_logp=-1.5 * mask)


def test_the_trainers_kl_coef_replaces_the_configured_one_and_padding_stays_zero():
    batch = kl_batch()
    tok_r = GAE(kl_coef=0.0).token_rewards(batch, batch.scalar_reward(), kl_coef=0.5)
    # R on the last valid token minus 0.5 · 0.5 on every valid token; 0 on padding (not 0/0)
    close(tok_r, [[-0.25, 0.75, 0.0], [1.75, 0.0, 0.0]])
