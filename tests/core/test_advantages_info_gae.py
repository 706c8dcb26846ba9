import torch

from polo.core.advantages import GAE, gae
from polo.core.advantages.info_gae import InfoGAE, information_density

from .helpers import build_batch, close

H = [[0.1, 2.0, 0.5, 1.0]]
V = [[0.4, 0.5, 0.45, 0.6]]


def info_batch(entropy=H, values=V, mask=None, rewards=(1.0,)):
    batch = build_batch(list(rewards), mask=mask or [[1] * len(values[0])] * len(values), values=values)
    batch.extras["entropy_old"] = torch.tensor(entropy, dtype=torch.float64)
    return batch


def test_density_and_information_time_gae():
    close(information_density(torch.tensor(H, dtype=torch.float64), torch.ones(1, 4)), [[0.05, 1.0, 0.25, 0.5]])
    out = InfoGAE(gamma=0.9, whiten=False)(info_batch())
    close(out.advantages, [[0.4720, 0.3766, 0.5240, 0.4000]])
    close(out.returns, [[0.8720, 0.8766, 0.9740, 1.0000]])
    token_time = GAE(gamma=0.9, whiten=False)(info_batch()).advantages
    close(token_time, [[0.3290, 0.3100, 0.4500, 0.4000]])


def test_unit_density_is_token_time_gae_and_default_whitens():
    batch = info_batch(entropy=[[1.0, 1.0, 1.0, 1.0]])
    close(InfoGAE(gamma=0.9, lam=0.8)(batch).advantages, GAE(gamma=0.9, lam=0.8)(batch).advantages)
    tok_r = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    close(gae(tok_r, batch.values, batch.mask, 0.9, 0.8, torch.ones(1, 4)), gae(tok_r, batch.values, batch.mask, 0.9, 0.8))
    assert InfoGAE().needs() == {"values", "entropy_old"} and InfoGAE().gamma == 0.999


def test_zero_entropy_freezes_the_clock_and_masked_tokens_are_skipped():
    # all-zero entropy: ρ = 0 everywhere, no discounting at all (γ^0 = 1)
    out = InfoGAE(gamma=0.5, whiten=False)(info_batch(entropy=[[0.0] * 4]))
    close(out.advantages, [[0.6, 0.5, 0.55, 0.4]])
    # a masked token (with a huge entropy) neither counts in the max nor breaks the recursion
    holed = info_batch(entropy=[[0.1, 50.0, 2.0, 0.5, 1.0]], values=[[0.4, 9.0, 0.5, 0.45, 0.6]], mask=[[1, 0, 1, 1, 1]])
    out = InfoGAE(gamma=0.9, whiten=False)(holed)
    close(out.advantages[:, [0, 2, 3, 4]], [[0.4720, 0.3766, 0.5240, 0.4000]])
    assert out.advantages[0, 1] == 0


def test_fully_masked_row_is_finite():
    batch = info_batch(entropy=[[0.1, 2.0, 0.5, 1.0], [3.0, 3.0, 3.0, 3.0]], values=[V[0], V[0]],
                       mask=[[1, 1, 1, 1], [0, 0, 0, 0]], rewards=(1.0, 0.0))
    out = InfoGAE(gamma=0.9)(batch)
    assert torch.isfinite(out.advantages).all() and (out.advantages[1] == 0).all()


# ---- mutation-testing kills
def test_density_floors_a_negative_entropy_and_accepts_no_tokens():
    # H = [2, −0.5]: ρ = H / 2 clamped to [0, 1] → [1, 0]
    close(information_density(torch.tensor([[2.0, -0.5]]), torch.ones(1, 2)), [[1.0, 0.0]])
    assert information_density(torch.zeros(1, 0), torch.zeros(1, 0)).shape == (1, 0)  # zero-width responses
