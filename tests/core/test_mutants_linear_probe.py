"""Mutation-testing kills for the linear value probe (polo/core/advantages/linear_probe.py)."""
import torch

from polo.core.advantages.linear_probe import fit_probe, pca_projection


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_k_at_the_rank_bound_keeps_the_block_whole():
    # 2 rows, a block of 3 columns: rank bound min(3 columns, 2 rows) = 2, so k = 2 keeps the identity
    z = t([[1.0, 0.0, 2.0], [0.0, 1.0, -2.0]])
    assert torch.equal(pca_projection(z, [(0, 3, 2)]), torch.eye(3, dtype=torch.float64))
    # 4 rows, a block of 2 columns: k = 2 = min(2, 4), the identity (not a rotation onto the principal axes)
    z = t([[1.0, 0.5], [2.0, 1.0], [0.0, 3.0], [1.0, 1.5]])
    assert torch.equal(pca_projection(z, [(0, 2, 2)]), torch.eye(2, dtype=torch.float64))


def test_pca_centres_each_column_of_its_rows():
    # centred by the column means (2, 10): (−1, 0), (1, 0), (0, 0.5), (0, −0.5); spread along x 2, along y 0.5,
    # so the top principal direction is ±x (uncentred, the large y = 10 would dominate)
    z = t([[1.0, 10.0], [3.0, 10.0], [2.0, 10.5], [2.0, 9.5]])
    top = pca_projection(z, [(0, 2, 1)])[:, 0]
    torch.testing.assert_close(top.abs(), t([1.0, 0.0]), rtol=0, atol=1e-12)


def test_a_constant_column_gets_scale_one():
    x = t([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    probe = fit_probe(x, t([0.0, 0.5, 1.0]), 0.1, [(0, 2, None)])
    assert probe["scale"][1].item() == 1.0  # population σ = 0 → 1 (column 0: σ = √(2/3))
    torch.testing.assert_close(probe["scale"][0], torch.tensor(2 / 3, dtype=torch.float64).sqrt())
