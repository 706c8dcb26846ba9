import pytest
import torch

from polo.core.registry import DIVERGENCES

from .helpers import close

LOGP = torch.tensor([-1.0, -0.5], dtype=torch.float64)
REF = torch.tensor([-1.2, -0.4], dtype=torch.float64)


@pytest.mark.parametrize(
    "name, expected", [("k1", [0.2, -0.1]), ("k2", [0.02, 0.005]), ("k3", [0.0187, 0.0052])]
)
def test_worked_example(name, expected):
    close(DIVERGENCES.build(name)(LOGP, REF), expected)


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_extreme_differences_are_finite_with_finite_grads(name):
    logp = torch.tensor([[50.0, -50.0, 0.0]], requires_grad=True)
    kl = DIVERGENCES.build(name)(logp, torch.zeros(1, 3))
    kl.sum().backward()
    assert torch.isfinite(kl).all() and torch.isfinite(logp.grad).all()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] == 0  # clamped at ±20


def test_k3_is_non_negative():
    assert (DIVERGENCES.build("k3")(torch.randn(100), torch.randn(100)) >= 0).all()


def test_the_log_ratio_is_capped_at_both_twenties():
    # k1 returns the capped log-ratio itself: −20.5 and +20.5 are read as −20 and +20 (the cap keeps k3's
    # exp(−δ) finite)
    k1 = DIVERGENCES.build({"name": "k1"})
    logp = torch.tensor([-20.5, 20.5, 3.0], dtype=torch.float64)
    assert k1(logp, torch.zeros(3, dtype=torch.float64)).tolist() == [-20.0, 20.0, 3.0]
