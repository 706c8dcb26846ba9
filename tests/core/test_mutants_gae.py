"""Mutation-testing kills for GAE (polo/core/advantages/gae.py): the trainer's KL coefficient, and every input
read in the token rewards' dtype."""
import torch

from polo.core.advantages.gae import GAE, gae

from .helpers import build_batch, close

BIG = float(2**24)  # float32 holds integers exactly up to 2^24: 2^24 + 1 rounds to 2^24


def test_call_uses_the_trainers_kl_coef():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    batch = build_batch([1.0, 2.0], mask=mask, old_logp=-1.0 * mask, ref_logp=-1.5 * mask, values=torch.zeros(2, 3))
    adv = GAE(kl_coef=0.0, whiten=False, gamma=1.0, lam=1.0)(batch, kl_coef=0.5).advantages
    # token rewards [−0.25, 0.75], [1.75] (k1 = 0.5, β = 0.5); γ = λ = 1, V = 0: A_t = Σ_{t' ≥ t} r_t'
    close(adv, [[0.5, 0.75, 0.0], [1.75, 0.0, 0.0]])


def test_values_are_read_in_the_token_rewards_dtype():
    # float32 r = 1, float64 V = 2^24 + 1 → 2^24 in float32: A = 1 − 2^24 (not 1 − 2^24 − 1)
    out = gae(torch.tensor([[1.0]]), torch.tensor([[BIG + 1]], dtype=torch.float64), torch.ones(1, 1), 1.0, 1.0)
    assert out.dtype == torch.float32 and out.item() == 1 - BIG


def test_dones_and_exponent_are_read_in_the_token_rewards_dtype():
    # float32 recursion, r = [1, 0], V = [2^24, 2^24], γ = λ = 1: A_1 = −2^24;
    # A_0 = ((1 + 2^24) − 2^24) + A_1 = (2^24 − 2^24) − 2^24 = −2^24 in float32 (1 + 2^24 rounds to 2^24);
    # a float64 recursion would keep the 1: 1 − 2^24
    r, v, mask = torch.tensor([[1.0, 0.0]]), torch.tensor([[BIG, BIG]]), torch.ones(1, 2)
    for kwargs in ({"dones": torch.zeros(1, 2, dtype=torch.float64)},
                   {"exponent": torch.ones(1, 2, dtype=torch.float64)}):
        out = gae(r, v, mask, 1.0, 1.0, **kwargs)
        assert out.tolist() == [[-BIG, -BIG]], kwargs


def test_the_bootstrap_value_is_read_in_the_token_rewards_dtype():
    # float32 r = 1, V = 0, float64 bootstrap 2^24 + 1 → 2^24 in float32: A = 1 + 2^24 → 2^24 in float32 (a
    # float64 bootstrap kept as is would give 2^24 + 2, which float32 holds)
    out = gae(torch.tensor([[1.0]]), torch.zeros(1, 1), torch.ones(1, 1), 1.0, 1.0,
              bootstrap=torch.tensor([BIG + 1], dtype=torch.float64))
    assert out.dtype == torch.float32 and out.item() == BIG
