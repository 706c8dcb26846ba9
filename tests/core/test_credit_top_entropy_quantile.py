import torch

from polo.core.credit.top_entropy_quantile import TopEntropyQuantile

from .helpers import build_batch, close

H = [[0.1, 2.0, 0.5, 1.0, 0.3], [1.5, 0.2, 9.0, 9.0, 9.0]]
MASK = [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]


def batch(mask=MASK, entropy=H):
    b = build_batch([0.0, 0.0], mask=torch.tensor(mask))
    b.extras["entropy_old"] = torch.tensor(entropy, dtype=torch.float64)
    return b


def test_keeps_the_top_fraction_of_valid_tokens():
    w = TopEntropyQuantile()(batch())  # 7 valid tokens → ⌈0.2·7⌉ = 2 kept; padding's entropy ignored
    close(w, [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    close(TopEntropyQuantile(rescale=True)(batch()), [[0, 3.5, 0, 0, 0], [3.5, 0, 0, 0, 0]])
    close(TopEntropyQuantile(rho=1.0)(batch()), MASK)


def test_ties_are_kept_and_empty_batches_give_zeros():
    close(TopEntropyQuantile(rho=0.1)(batch(entropy=[[1.0] * 5, [1.0] * 5])), MASK)
    assert (TopEntropyQuantile()(batch(mask=[[0] * 5, [0] * 5])) == 0).all()
    assert TopEntropyQuantile().needs() == {"entropy_old"}
