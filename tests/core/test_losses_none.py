"""``none``: no policy-gradient term (pure on-policy distillation)."""
import torch

from polo.core.registry import POLICY_LOSSES

from .helpers import build_batch


def test_zero_loss_with_a_zero_gradient_whatever_the_advantage():
    b = build_batch([1.0, 0.0], mask=torch.ones(2, 3))
    b.advantages = torch.tensor([[2.0] * 3, [-1.0] * 3], dtype=torch.float64)
    logp = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    loss = POLICY_LOSSES.build("none")
    out = loss(logp, b)
    assert torch.equal(out.token_loss, torch.zeros(2, 3, dtype=torch.float64)) and out.loss is None
    out.token_loss.sum().backward()  # on the graph: a step with nothing else to learn is a zero gradient
    assert torch.equal(logp.grad, torch.zeros_like(logp))
    assert loss.needs() == set() and loss.inert_at_zero_advantage


# ---- mutation-testing kills (docs/mutation.md)
def test_reports_no_metrics():
    b = build_batch([1.0], mask=torch.ones(1, 2))
    assert POLICY_LOSSES.build("none")(torch.zeros(1, 2), b).metrics == {}
