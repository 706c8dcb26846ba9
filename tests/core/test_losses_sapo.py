import math

from polo.core.losses.sapo import SAPO

from .helpers import close
from .zoo_helpers import ratio_batch


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_gate_values_and_gradients():
    logp, batch = ratio_batch([1.0, 1.5, 0.5], [1.0, 1.0, -1.0])
    out = SAPO()(logp, batch)
    tau_neg = 1.05
    close(out.token_loss[0].detach(), [-2.0, -4 * sigmoid(0.5), 4 / tau_neg * sigmoid(-0.5 * tau_neg)])
    out.token_loss.sum().backward()
    d = [4 * sigmoid(x) * (1 - sigmoid(x)) for x in (0.0, 0.5, -0.5 * tau_neg)]
    close(logp.grad[0], [-1.0, -d[1] * 1.5, d[2] * 0.5])  # −A at r = 1: the on-policy gradient


def test_far_off_policy_tokens_are_softly_silenced():
    logp, batch = ratio_batch([30.0, 1e-4], [1.0, -1.0])
    SAPO()(logp, batch).token_loss.sum().backward()
    assert logp.grad.abs().max() < 1e-4


# ---- mutation-testing kills (docs/mutation.md)
def test_zero_advantage_takes_tau_neg_in_float64_and_metric_names():
    # r = 1: gate = σ(0)·4/τ = 2/τ; A = 0 is not > 0, so τ = τ_neg = 1.5 (exact in binary), and 4/τ is taken in
    # float64: 2/1.5 to 1e-12 (in float32 it is off by 8e-8)
    logp, batch = ratio_batch([1.0, 1.0], [0.0, -1.0])
    out = SAPO(tau_neg=1.5)(logp, batch)
    close(out.metrics["gate_mean"], 2 / 1.5, atol=1e-12)
    close(out.metrics["ratio_mean"], 1.0)


def test_the_default_tau_neg_is_not_rounded_to_float32():
    # r = 1, A = −1 (float64 rows): gate = 2/τ_neg with τ_neg = 1.05 itself, not float32's 1.0499999523 (2/τ
    # would then differ by 8.6e-8, far above float64's 1e-12)
    logp, batch = ratio_batch([1.0], [-1.0])
    close(SAPO()(logp, batch).metrics["gate_mean"], 2 / 1.05, atol=1e-12)
