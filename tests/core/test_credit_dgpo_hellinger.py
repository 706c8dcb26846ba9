import pytest
import torch

from polo.core.credit.dgpo_hellinger import DGPOHellinger, dgpo_scores

from .helpers import build_batch, close

PI = [[0.7, 0.2, 0.1], [0.4, 0.4, 0.2], [0.98, 0.01, 0.01]]
REF = [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.90, 0.05, 0.05]]


def batch(mask):
    b = build_batch([0.0] * len(mask), mask=torch.tensor(mask))
    b.extras["old_dist"] = torch.tensor([PI] * len(mask), dtype=torch.float64).log()
    b.extras["ref_dist"] = torch.tensor([REF] * len(mask), dtype=torch.float64).log()
    return b


def test_worked_example():
    b = batch([[1, 1, 1]])
    close(dgpo_scores(b.extras["old_dist"], b.extras["ref_dist"], 1.0)[0], [0.0, 0.0240, 0.0016])
    w = DGPOHellinger()(b)
    close(w[0], [0.9828, 1.0311, 0.9860])
    close(1.5 * w[0], [1.4742, 1.5467, 1.4791])  # adv = A_i·w with A_i = 1.5


def test_weights_sum_to_valid_tokens_and_padding_gets_zero():
    w = DGPOHellinger()(batch([[1, 1, 0], [0, 0, 0]]))
    close(w.sum(-1), [2.0, 0.0])
    assert w[0, 2] == 0 and torch.isfinite(w).all()
    assert DGPOHellinger().needs() == {"old_dist", "ref_dist"}


def test_reads_the_inputs_under_the_names_it_declares():
    b = batch([[1, 1, 1]])
    for name in DGPOHellinger().needs():
        assert b.input(name) is b.extras[name]  # the trainer writes each declared input under its name
    b.extras["old_logprobs_full"] = b.extras.pop("old_dist")  # the old, undeclared name is not read
    with pytest.raises(KeyError, match="old_dist"):
        DGPOHellinger()(b)


def test_zero_probabilities_are_finite():
    b = batch([[1, 1, 1]])
    b.extras["ref_dist"][0, 1, 0] = -torch.inf
    assert torch.isfinite(DGPOHellinger()(b)).all()


# ---- mutation-testing kills (docs/mutation.md)
def test_entropy_is_normalised_by_the_vocabulary_and_raised_to_kappa():
    # π = [0.5, 0.25, 0.25], π_ref = [0.25, 0.25, 0.5] on each of T = 2 tokens (V = 3 ≠ T):
    # d = 1 − (2·sqrt(0.125) + 0.25) = 0.042893, H̃ = 1.039721/ln 3 = 0.946395, s = d·H̃² at κ = 2
    old = torch.tensor([[[0.5, 0.25, 0.25]] * 2], dtype=torch.float64).log()
    ref = torch.tensor([[[0.25, 0.25, 0.5]] * 2], dtype=torch.float64).log()
    close(dgpo_scores(old, ref, 2.0), [[0.038418, 0.038418]], atol=1e-6)
