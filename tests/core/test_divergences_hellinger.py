import torch

import polo.core.divergences  # noqa: F401  (registers)
from polo.core.registry import DIVERGENCES

from .helpers import close


def test_values():
    logp = torch.tensor([-1.0, -0.5], dtype=torch.float64)
    close(DIVERGENCES.build("hellinger")(logp, torch.tensor([-1.2, -0.4], dtype=torch.float64)),
          [1 - torch.tensor(-0.1).exp(), 1 - torch.tensor(0.05).exp()])


def test_unbiased_for_the_squared_hellinger_distance():
    pi = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    ref = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    per_token = DIVERGENCES.build("hellinger")(pi.log(), ref.log())
    close((pi * per_token).sum(), 1 - (pi * ref).sqrt().sum())  # E_π[1 − sqrt(π_ref/π)] = 1 − BC


def test_extremes_are_finite():
    logp = torch.tensor([50.0, -50.0, 0.0], requires_grad=True)
    h = DIVERGENCES.build("hellinger")(logp, torch.zeros(3))
    h.sum().backward()
    assert torch.isfinite(h).all() and torch.isfinite(logp.grad).all()
