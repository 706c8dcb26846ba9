"""``distill``: generalized JSD to the teacher on the student's tokens (GKD), gated by reward (KEPO)."""
import pytest
import torch

from polo.core.distill import generalized_jsd, kl
from polo.core.registry import REGULARIZERS, ConfigError
from polo.core.regularizers.distill import Distill

from .helpers import build_batch, close

STUDENT = [0.5, 0.3, 0.2]
TEACHER = [0.2, 0.7, 0.1]


def kepo_batch():
    """§9: the group after augmentation, r = [2, 0, 2, 0] (accuracy + format), one token per rollout."""
    b = build_batch([2.0, 0.0, 2.0, 0.0])
    b.extras["teacher_dist"] = torch.tensor([[TEACHER]] * 4, dtype=torch.float64).log()
    return b


def student():
    return torch.tensor([[STUDENT]] * 4, dtype=torch.float64).log()


def test_kepo_worked_example_gate_and_token_loss():
    b = kepo_batch()
    reg = Distill(beta=0.5, gate="reward", tau=1.5)
    close(reg.scope(b)[:, 0], [1.0, 0.0, 1.0, 0.0])  # g_i = 1[r_i >= 1.5]
    out = reg(torch.zeros(4, 1), b, student())
    close(out.token_loss[:, 0], [0.0828, 0.0, 0.0828, 0.0])
    close((out.token_loss * reg.scope(b)).sum() / reg.scope(b).sum(), 0.0828)  # L_D over the gated tokens
    assert out.metrics["gated_frac"] == 0.5


def test_gate_all_is_every_valid_token_and_beta_zero_is_the_forward_kl():
    b = kepo_batch()
    b.response_mask = torch.tensor([[1], [1], [0], [1]])
    reg = Distill(beta=0.0)
    close(reg.scope(b)[:, 0], [1.0, 1.0, 0.0, 1.0])
    u = reg(torch.zeros(4, 1), b, student()).token_loss[:, 0]
    forward = kl(torch.tensor(TEACHER, dtype=torch.float64).log(), torch.tensor(STUDENT, dtype=torch.float64).log())
    close(u, [forward, forward, 0.0, forward])  # VERPO's reference channel KL(q0||p) = 0.0258 on its example
    p, q0 = torch.tensor([0.5, 0.3, 0.2]).log(), torch.tensor([0.4, 0.4, 0.2]).log()
    close(generalized_jsd(p, q0, 0.0), 0.0258)


def test_gradient_flows_to_the_student_on_gated_tokens_only():
    b = kepo_batch()
    logprobs = student().clone().requires_grad_(True)
    Distill(gate="reward", tau=1.5)(torch.zeros(4, 1), b, logprobs).token_loss.sum().backward()
    assert (logprobs.grad[[1, 3]] == 0).all() and (logprobs.grad[[0, 2]] != 0).any()


def test_top_k_teacher():
    """Teacher top-2 on a 4-token vocabulary: both sides on [id a, id b, tail]."""
    b = build_batch([1.0])
    full_t = torch.tensor([[[0.1, 0.6, 0.25, 0.05]]], dtype=torch.float64).log()
    ids = full_t.topk(2, -1).indices  # [1, 2]
    b.extras["teacher_dist"] = full_t.gather(-1, ids)
    b.extras["teacher_dist_ids"] = ids
    s = torch.tensor([[[0.4, 0.3, 0.2, 0.1]]], dtype=torch.float64).log()
    u = Distill(beta=0.5)(torch.zeros(1, 1), b, s).token_loss
    expected = generalized_jsd(torch.tensor([0.3, 0.2, 0.5], dtype=torch.float64).log(),
                               torch.tensor([0.6, 0.25, 0.15], dtype=torch.float64).log(), 0.5)
    close(u[0, 0], expected)


def test_padding_and_empty_gate_stay_finite():
    b = kepo_batch()
    b.extras["teacher_dist"][1] = 0.0  # padding-like rows: log-probs 0, not a distribution
    out = Distill(gate="reward", tau=5.0)(torch.zeros(4, 1), b, torch.zeros(4, 1, 3, dtype=torch.float64))
    assert torch.equal(out.token_loss, torch.zeros(4, 1, dtype=torch.float64))


def test_settings_are_checked():
    assert REGULARIZERS.get("distill") is Distill and Distill().needs() == {"teacher_dist"}
    with pytest.raises(ConfigError, match="beta"):
        REGULARIZERS.build({"name": "distill", "beta": 1.5})
    with pytest.raises(ConfigError, match="gate"):
        REGULARIZERS.build({"name": "distill", "gate": "correct"})


def test_kepo_recipe_advantage_of_the_worked_example():
    """§9's group r = [2, 0, 2, 0] under the kepo recipe's estimator (TRL: unbiased std + 1e-4)."""
    from polo.train.config import load_recipe

    components = load_recipe("kepo").built().components
    close(components["advantage"](kepo_batch()).advantages[:, 0], [0.8660, -0.8660, 0.8660, -0.8660])
    gate = components["regularizer.0"]
    assert (gate.gate, gate.beta) == ("reward", 0.5)


# ---- mutation-testing kills (docs/mutation.md)
def test_gate_keeps_a_reward_equal_to_tau_and_reports_the_mean_jsd():
    b = kepo_batch()
    reg = Distill(gate="reward", tau=2.0)  # g_i = 1[r_i ≥ τ]: r = 2 is in
    close(reg.scope(b)[:, 0], [1.0, 0.0, 1.0, 0.0])
    assert reg(torch.zeros(4, 1), b, student()).metrics["jsd"] == pytest.approx(0.0828, abs=1e-4)  # §9's L_D
