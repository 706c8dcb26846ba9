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
