import torch

from polo.core.context import StepContext
from polo.core.losses.r2vpo import R2VPO

from .helpers import close
from .zoo_helpers import ratio_batch, token_mean_backward

CONTEXT = StepContext(step=1, policy_logp=lambda batch: batch.old_logp, lr=1e-3)


def worked_example(loss):
    logp, batch = ratio_batch([1.0, 1.3, 0.6, 2.0], [1.0, 1.0, -1.0, 2.0])
    out = loss(logp, batch)
    return out, batch, *token_mean_backward(out, logp, batch)


def test_worked_example_loss_gradient_and_dual_step():
    loss = R2VPO()
    out, batch, value, grad = worked_example(loss)
    close(value, -1.39375)
    close(out.metrics["ratio_variance"], 0.3125)
    close(grad[0], [-0.2500, -0.3055, 0.1380, -0.9000])  # −(1/N)·r(Â − 2λ(r − 1))
    metrics = loss.after_update(batch, CONTEXT)
    close(torch.tensor(metrics["r2vpo/lambda"]), 0.12725)
    close(torch.tensor(loss.lam), 0.12725)


def test_dual_step_uses_the_token_weighted_variance_of_the_step():
    loss = R2VPO()
    for ratios in ([1.5, 1.5], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]):
        logp, batch = ratio_batch(ratios, [0.0] * len(ratios))
        loss(logp, batch)
    loss.after_update(batch, CONTEXT)
    close(torch.tensor(loss.lam), 0.1 + 0.1 * (0.5 / 8 - 0.04))
    assert loss.after_update(batch, CONTEXT) == {"r2vpo/lambda": loss.lam}  # nothing recorded: no step


def test_multiplier_stays_non_negative_and_fixed_without_dual_update():
    loss = R2VPO(lambda_init=0.01, lambda_lr=1.0)
    logp, batch = ratio_batch([1.0], [1.0])
    loss(logp, batch)
    loss.after_update(batch, CONTEXT)
    assert loss.lam == 0.0
    fixed = R2VPO(lambda_init=0.04, dual_update=False)
    worked_example(fixed)
    fixed.after_update(batch, CONTEXT)
    assert fixed.lam == 0.04


def test_state_round_trip():
    loss = R2VPO()
    worked_example(loss)
    loss.after_update(None, CONTEXT)
    state = loss.state_dict()
    assert all(isinstance(v, (float, int, torch.Tensor)) for v in state.values())
    restored = R2VPO()
    restored.load_state_dict(state)
    assert restored.lam == loss.lam and restored.state_dict() == state


# ---- mutation-testing kills (docs/mutation.md)
def test_metrics_and_each_step_starts_a_fresh_variance():
    loss = R2VPO(dual_update=False)
    out, batch, _, _ = worked_example(loss)
    close(out.metrics["ratio_mean"], 1.225)  # (1 + 1.3 + 0.6 + 2)/4
    close(out.metrics["lambda"], 0.1)
    close(torch.tensor(loss.after_update(batch, CONTEXT)["r2vpo/ratio_variance"]), 0.3125)
    logp, batch = ratio_batch([1.0, 1.0], [0.0, 0.0])  # the next step: r = 1, variance 0
    loss(logp, batch)
    assert loss.after_update(batch, CONTEXT)["r2vpo/ratio_variance"] == 0.0
