import math

import pytest
import torch

from polo.core.losses.ctpo import CTPOCumulative

from .helpers import build_batch, close
from .zoo_helpers import ratio_batch

DELTA = [0.06, 0.03, -0.08, 0.05]


def run(loss, delta, adv, mask=None):
    logp, batch = ratio_batch([math.exp(d) for d in delta], [adv] * len(delta), mask=mask)
    out = loss(logp, batch)
    (out.token_loss * batch.mask).sum().backward()
    return out, logp.grad[0]


@pytest.mark.parametrize("adv, expected", [(1.0, [-1.0513, -1.0733, -1.0101, -1.0618]),
                                           (-1.0, [1.0513, 1.0733, 1.0101, 1.0618])])
def test_worked_example(adv, expected):
    out, grad = run(CTPOCumulative(), DELTA, adv)
    close(out.token_loss[0].detach(), expected)
    close(grad, [0.0, 0.0, -adv * 1.0101, -adv * 1.0618])  # tokens 1–2 clipped (A>0) / dual-clipped (A<0)
    close(out.metrics["clip_frac_dual"], 0.5 if adv < 0 else 0.0)


def test_geomean_mode_gives_the_running_geometric_mean():
    out, grad = run(CTPOCumulative(mode="geomean", c_lo=10, c_hi=10, c_c=10), DELTA, 1.0)
    close(out.token_loss[0].detach(), [-1.0618, -1.0460, -1.0033, -1.0151])
    close(grad, [-1.0618, -1.0460, -1.0033, -1.0151])  # gradient through the current token only


def test_geomean_bounds_shrink_with_position():
    out, _ = run(CTPOCumulative(mode="geomean"), [0.04] * 4, 1.0)
    close(out.token_loss[0].detach(), [-math.exp(min(0.04, 0.05 / math.sqrt(n))) for n in (1, 2, 3, 4)])


def test_masked_tokens_neither_accumulate_nor_advance_the_position():
    out, grad = run(CTPOCumulative(), [0.06, 100.0, 0.03, -0.08], 1.0, mask=[1, 0, 1, 1])
    close(out.token_loss[0, [0, 2, 3]].detach(), [-1.0513, -1.0733, -1.0101])
    assert grad[1] == 0


def test_cumulative_log_ratio_is_capped():
    out, grad = run(CTPOCumulative(c_hi=100, c_lo=100, c_c=100), [8.0, 8.0], -1.0)
    assert torch.isfinite(out.token_loss).all()
    close(out.token_loss[0, 1].detach(), math.exp(10))
    assert grad[1] == 0


# ---- mutation-testing kills (docs/mutation.md)
def test_cumprod_lower_bound_grows_with_position():
    # δ = −0.1 per token, A = −1: C_t = −0.1·t lies below −b_lo = −0.025·√t, so u_t = exp(−0.025·√t)
    out, _ = run(CTPOCumulative(), [-0.1] * 3, -1.0)
    close(out.token_loss[0].detach(), [math.exp(-0.025 * math.sqrt(n)) for n in (1, 2, 3)])


def test_each_token_log_ratio_is_clamped_to_twenty_before_accumulating():
    # wide bounds, A = 1 so u_t = −exp(C_t): δ = [25, −15] → C = [min(20, 10), 20 − 15] = [10, 5];
    # δ = [−25, 15] → C = [−20, −5]
    wide = CTPOCumulative(c_hi=100, c_lo=100, c_c=100)
    out, _ = run(wide, [25.0, -15.0], 1.0)
    close(out.token_loss[0, 1].detach() / -math.exp(5), 1.0, atol=1e-9)
    out, _ = run(wide, [-25.0, 15.0], 1.0)
    close(out.token_loss[0].detach() / torch.tensor([-math.exp(-20), -math.exp(-5)], dtype=torch.float64),
          [1.0, 1.0], atol=1e-9)


def test_power_overrides_the_default_exponent():
    # geomean, power 0: the bounds stay 0.05 at every position, so a running mean of 0.04 is never clipped
    out, _ = run(CTPOCumulative(mode="geomean", power=0.0), [0.04] * 4, 1.0)
    close(out.token_loss[0].detach(), [-math.exp(0.04)] * 4)


def test_dual_clip_is_for_negative_advantages_strictly_above_the_bound():
    out, _ = run(CTPOCumulative(), [0.0, 0.0], 0.5)  # A > 0: plain surrogate −A·r = −0.5, no dual bound
    close(out.token_loss[0].detach(), [-0.5, -0.5])
    # one token, δ = 0.05 exactly, A = −1: u = r = e^0.05 equals the dual bound exp(c_c·1): not dual-clipped,
    # the gradient still flows (∂u/∂logp = r)
    logp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    batch = build_batch([0.0], old_logp=[[-0.05]], advantages=[[-1.0]])
    out = CTPOCumulative()(logp, batch)
    out.token_loss.sum().backward()
    assert out.metrics["clip_frac_dual"] == 0.0
    close(logp.grad, [[math.exp(0.05)]])
