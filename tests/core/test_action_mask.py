"""NLPO action mask: worked example of the top-p nucleus and the renormalized policy."""
import math

import pytest
import torch

from polo.core.action_mask import masked_log_softmax, top_p_allow


def test_worked_example_allow_and_renormalized_policy():
    psi = torch.tensor([0.5, 0.25, 0.15, 0.06, 0.03, 0.01], dtype=torch.float64)
    allow = top_p_allow(psi.log(), 0.85)
    assert allow.tolist() == [True, True, True, False, False, False]
    pi = torch.tensor([0.3, 0.2, 0.3, 0.1, 0.05, 0.05], dtype=torch.float64)
    old = torch.tensor([0.25, 0.25, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    lp, old_lp = masked_log_softmax(pi.log(), allow), masked_log_softmax(old.log(), allow)
    assert torch.allclose(lp.exp(), torch.tensor([0.375, 0.25, 0.375, 0, 0, 0], dtype=torch.float64), atol=1e-4)
    assert torch.allclose(old_lp.exp()[:3], torch.tensor([0.3571, 0.3571, 0.2857], dtype=torch.float64), atol=1e-4)
    assert lp[2].item() == pytest.approx(-0.9808, abs=1e-4)
    r = math.exp(lp[2] - old_lp[2])
    assert r == pytest.approx(1.3125, abs=1e-4)
    assert min(r * 0.5, min(r, 1.2) * 0.5) == pytest.approx(0.6, abs=1e-4)


def test_top1_min_keep_and_always_allowed():
    logits = torch.tensor([[10.0, 0.0, 0.0, 0.0]])
    assert top_p_allow(logits, 0.5).tolist() == [[True, False, False, False]]
    assert top_p_allow(logits, 0.5, min_tokens_to_keep=2).sum() == 2
    assert top_p_allow(logits, 0.5, always_allowed=torch.tensor([3])).tolist() == [[True, False, False, True]]


def test_masked_log_softmax_is_finite_on_allowed_and_normalized():
    logits = torch.randn(2, 3, 7)
    allow = top_p_allow(torch.randn(2, 3, 7), 0.7)
    lp = masked_log_softmax(logits, allow)
    assert torch.isfinite(lp[allow]).all() and torch.isinf(lp[~allow]).all()
    assert torch.allclose(lp.exp().sum(-1), torch.ones(2, 3))


def test_bad_top_p_is_named():
    with pytest.raises(ValueError, match="top_p"):
        top_p_allow(torch.zeros(3), 0.0)
