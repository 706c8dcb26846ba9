"""The implicit_prm role: its cross-entropy loss by hand, its gradient, the temperature it is lent, and one
optimizer step (through the trainer's Critics) moving the implicit reward towards the outcome labels."""
import math

import pytest
import torch
from torch import nn

from polo.core.aggregation import AGGREGATIONS, StepCounts
from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.methods.prime.role import ImplicitPRM, ImplicitRewardModel
from polo.policy.reference import frozen_copy
from polo.roles.base import ROLES, RoleResources
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.train.critics import Critics

AGG = AGGREGATIONS.build("token_mean")


class FixedLM(nn.Module):
    """A stand-in for π_φ whose response log-probs are a parameter (0 where masked); records the temperature."""

    def __init__(self, logp):
        super().__init__()
        self.logp = nn.Parameter(torch.tensor(logp))
        self.temperatures = []

    def forward_logp(self, prompt_ids, prompt_mask, response_ids, response_mask, *, temperature=1.0):
        self.temperatures.append(temperature)
        return {"logp": self.logp * response_mask}


def hand_batch(correct=(1.0, 0.0)):
    mask = torch.tensor([[1, 1], [1, 0]])
    return RolloutBatch(torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1, dtype=torch.long),
                        torch.zeros(2, 2, dtype=torch.long), mask, torch.tensor([0, 0]), torch.zeros(2),
                        ref_logp=torch.tensor([[-1.5, -2.5], [-0.1, 0.0]]),
                        extras={"correct": torch.tensor(correct)})


def test_loss_by_hand_and_its_gradient():
    # β = 0.5; row 0 (correct): s = 0.5·((−1 + 1.5) + (−2 + 2.5)) = 0.5, −log σ(0.5) = log(1 + e^−0.5) = 0.474077;
    # row 1 (wrong, one token): s = 0.5·(−0.5 + 0.1) = −0.2, −log(1 − σ(−0.2)) = log(1 + e^−0.2) = 0.598139
    role = ImplicitPRM(beta=0.5)
    model = ImplicitRewardModel(FixedLM([[-1.0, -2.0], [-0.5, 7.0]]), role.beta)
    loss, stats = role.loss(model, hand_batch(), StepCounts(3, 2, 2, 2), AGG)
    assert float(loss.detach()) == pytest.approx((0.474077 + 0.598139) / 2, abs=1e-6)
    assert stats == pytest.approx({"accuracy": 1.0, "reward": (0.5 - 0.2) / 2})
    loss.backward()
    # ∂L/∂logp_t = β·(σ(s) − c)/B' on trained tokens: row 0 0.5·(0.622459 − 1)/2, row 1 0.5·0.450166/2
    expected = torch.tensor([[-0.0943852, -0.0943852], [0.1125416, 0.0]])
    torch.testing.assert_close(model.lm.logp.grad, expected, atol=1e-6, rtol=0)


def test_minibatch_counts_normalise_the_micro_batch_and_untrained_rows_weigh_nothing():
    role = ImplicitPRM(beta=0.5)
    model = ImplicitRewardModel(FixedLM([[-1.0, -2.0], [-0.5, 7.0]]), role.beta)
    half, _ = role.loss(model, hand_batch(), StepCounts(6, 4, 4, 2), AGG)  # the micro-batch is half the minibatch
    assert float(half.detach()) == pytest.approx((0.474077 + 0.598139) / 4, abs=1e-6)
    batch = hand_batch()
    batch.response_mask = torch.tensor([[1, 1], [0, 0]])  # row 1 has no trained token
    loss, stats = role.loss(model, batch, StepCounts(2, 1, 2, 2), AGG)
    assert float(loss.detach()) == pytest.approx(0.474077, abs=1e-6) and stats["accuracy"] == 1.0


def test_the_loss_takes_its_log_probs_at_the_lent_temperature():
    role = ImplicitPRM()
    lm = FixedLM([[-1.0, -2.0], [-0.5, 0.0]])
    role.bind(RoleResources(temperature=0.7))
    role.loss(ImplicitRewardModel(lm, role.beta), hand_batch(), StepCounts(3, 2, 2, 2), AGG)
    assert lm.temperatures == [0.7]


def test_missing_label_or_reference_is_named():
    role = ImplicitPRM()
    model = ImplicitRewardModel(FixedLM([[-1.0, -2.0], [-0.5, 0.0]]), role.beta)
    batch = hand_batch()
    del batch.extras["correct"]
    with pytest.raises(ValueError, match="correct=missing, ref_logp=present"):
        role.loss(model, batch, StepCounts(3, 2, 2, 2), AGG)
    batch = hand_batch()
    batch.ref_logp = None
    with pytest.raises(ValueError, match="correct=present, ref_logp=missing"):
        role.loss(model, batch, StepCounts(3, 2, 2, 2), AGG)


def test_one_step_moves_the_implicit_reward_towards_the_labels():
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))
    reference = frozen_copy(policy)
    role = ROLES.build({"name": "implicit_prm", "lr": 1e-2}, "roles.implicit_prm")
    model = role.build(policy)
    assert isinstance(model, ImplicitRewardModel) and model.beta == 0.05
    prompt_ids, prompt_mask = policy.encode_prompts(["12+3=", "12+3=", "4*2=", "4*2="])
    response_ids, response_mask = policy.encode_completions(["15", "51", "8", "9 "])
    with torch.no_grad():
        ref_logp = reference.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask)["logp"]
    batch = RolloutBatch(prompt_ids, prompt_mask, response_ids, response_mask, torch.tensor([0, 0, 1, 1]),
                         torch.zeros(4), ref_logp=ref_logp, extras={"correct": torch.tensor([1.0, 0.0, 1.0, 0.0])})

    def scores():
        with torch.no_grad():
            return model(batch, ref_logp, 1.0).sum(-1)

    # π_φ starts as the policy, the reference's weights: r = 0 up to float32 rounding (one kernel may split a
    # reduction differently for the two calls on some CPUs: seen −2.4e-8 on an AVX-512 Xeon); a wrong start is O(β)
    assert torch.allclose(scores(), torch.zeros(4), rtol=0, atol=1e-6), scores()
    critics = Critics([("implicit_prm", role, model)], grad_clip=1.0)
    counts = StepCounts.from_mask(batch.mask, 2)
    stats = critics.backward(batch, counts, AGG)
    assert stats["loss/implicit_prm"] == pytest.approx(math.log(2), abs=1e-6)  # σ(0) = 1/2 for every row
    assert critics.step() == 0
    after = scores()
    assert (after[[0, 2]] > 0).all() and (after[[1, 3]] < 0).all(), after
    loss, _ = role.loss(model, batch, counts, AGG)
    assert float(loss.detach()) < math.log(2)


def test_settings_are_validated():
    role = ROLES.build({"name": "implicit_prm"}, "roles.implicit_prm")
    assert (role.beta, role.lr, role.warmup_steps) == (0.05, 1e-3, 0) and role.trainable and role.checkpointed
    for bad in ({"beta": 0.0}, {"lr": -1.0}, {"warmup_steps": -1}, {"gamma": 1.0}):
        with pytest.raises(ConfigError, match="roles.implicit_prm"):
            ROLES.build({"name": "implicit_prm", **bad}, "roles.implicit_prm")
