"""OPPO: the triplet, the norm penalty and the two-step update (spec §19 worked example), and the LM component
(contexts from pooled hidden states, the value of step 1, gradients of step 2 into z* alone, its own optimizer
and checkpointed state)."""
import re

import pytest
import torch

from polo.core.losses.oppo import OPPO, context_distance, norm_penalty, oppo_terms, triplet

from .helpers import build_batch, close


def test_worked_example():
    z_star, pos, neg = torch.tensor([1.0, 0.0]), torch.tensor([[0.8, 0.6]]), torch.tensor([[0.0, 1.0]])
    close(context_distance(z_star, pos), [0.6325])
    close(context_distance(z_star, neg), [1.4142])
    close(triplet(z_star, pos, neg, margin=1.0), [0.2182])
    close(norm_penalty(torch.cat([pos, neg])), [0.0, 0.0])  # both contexts have unit norm


def test_triplet_is_zero_beyond_the_margin_and_distance_has_the_offset():
    z_star = torch.zeros(2)
    close(triplet(z_star, torch.tensor([[0.1, 0.0]]), torch.tensor([[3.0, 0.0]]), margin=1.0), [0.0])
    close(context_distance(torch.zeros(3), torch.zeros(3)), 3 ** 0.5 * 1e-6, atol=1e-9)  # ‖0 + 1e-6‖


def test_the_two_steps_send_gradients_to_separate_parameters():
    z_star = torch.tensor([1.0, 0.0], requires_grad=True)
    pos = torch.tensor([[0.8, 0.6]], requires_grad=True)
    neg = torch.tensor([[0.0, 1.0]], requires_grad=True)
    encoder, anchor = oppo_terms(z_star, pos, neg, margin=1.0)
    close(encoder.detach(), [0.2182])
    close(anchor.detach(), [0.2182])
    encoder.sum().backward()
    assert z_star.grad is None and pos.grad.abs().sum() > 0 and neg.grad.abs().sum() > 0
    pos.grad = neg.grad = None
    anchor.sum().backward()
    assert pos.grad is None and neg.grad is None
    # ∂/∂z* [d(z*, z⁺) − d(z*, z⁻)] = unit(z* − z⁺) − unit(z* − z⁻) (the 1e-6 offset is below the tolerance)
    expected = (torch.tensor([0.2, -0.6]) / 0.6325) - (torch.tensor([1.0, -1.0]) / 1.4142)
    close(z_star.grad, expected)


def pair_batch(lengths=(2, 3, 1, 2), chosen=(1.0, 0.0, 0.0, 1.0), d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, T, Tp = len(lengths), max(lengths), 2
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).double()
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * mask).requires_grad_()
    hidden = torch.randn(B, Tp + T, d, generator=g, dtype=torch.float64, requires_grad=True)
    batch = build_batch([0.0] * B, group=[0, 0, 1, 1], mask=mask, old_logp=logp.detach())
    batch.extras["chosen"] = torch.tensor(chosen, dtype=torch.float64)
    return logp, hidden, batch


def test_component_value_is_step_one_from_pooled_contexts():
    logp, hidden, batch = pair_batch()
    loss = OPPO(context_dim=4, pref_coef=0.3, norm_coef=0.2)
    out = loss(logp, batch, hidden=hidden)
    mask = batch.mask
    pooled = (hidden[:, 2:] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    z = loss._head(pooled.float()).double()
    star = loss._z_star.detach().double()
    pos, neg = z[[0, 3]], z[[1, 2]]
    rec = -(logp * mask).sum(1) / mask.sum(1)
    expected = (rec[[0, 3]] + 0.3 * triplet(star, pos, neg, 1.0)
                + 0.2 * (norm_penalty(pos) + norm_penalty(neg))).mean()
    close(out.loss.detach(), expected.detach(), atol=1e-5)
    close(out.metrics["rec_nll"], rec[[0, 3]].mean().detach())
    out.loss.backward()
    assert hidden.grad.abs().sum() > 0 and logp.grad.abs().sum() > 0
    assert hidden.grad[:, :2].abs().sum() == 0  # only the response positions are pooled
    anchor = triplet(loss._z_star, pos.detach().float(), neg.detach().float(), 1.0).mean()
    (grad,) = torch.autograd.grad(anchor, loss._z_star)
    close(loss._z_star.grad, grad, atol=1e-6)  # z* receives step 2's gradient only


def test_after_update_steps_the_head_and_anchor_and_state_round_trips():
    logp, hidden, batch = pair_batch()
    loss = OPPO(context_dim=4)
    assert loss.state_dict() == {} and loss.after_update(batch, None) == {}
    loss(logp, batch, hidden=hidden).loss.backward()
    before = loss._z_star.detach().clone()
    metrics = loss.after_update(batch, None)
    assert not torch.equal(before, loss._z_star.detach()) and loss._z_star.grad is None
    assert metrics["oppo/z_star_norm"] > 0
    state = loss.state_dict()
    restored = OPPO(context_dim=4, seed=5)
    restored.load_state_dict(state)
    assert torch.equal(restored._z_star.detach(), loss._z_star.detach())
    assert torch.equal(restored._head.weight, loss._head.weight)
    assert restored._optimizer.state_dict()["state"].keys() == loss._optimizer.state_dict()["state"].keys()


def test_seeded_initialisation_and_tied_pairs():
    logp, hidden, batch = pair_batch()
    a, b = OPPO(context_dim=4), OPPO(context_dim=4)
    a(logp, batch, hidden=hidden), b(logp, batch, hidden=hidden)
    assert torch.equal(a._z_star, b._z_star) and torch.equal(a._head.weight, b._head.weight)
    batch.extras["pair_valid"] = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    batch.extras["chosen"] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    out = OPPO(context_dim=4)(logp, batch, hidden=hidden)
    out.loss.backward()
    assert hidden.grad[2:].abs().sum() == 0 and logp.grad[2:].abs().sum() == 0
    close(out.metrics["pairs_used"], 0.5)


def test_hidden_states_are_required():
    logp, hidden, batch = pair_batch()
    with pytest.raises(ValueError, match="hidden"):
        OPPO()(logp, batch)
    assert OPPO.training_hidden_layer == -1 and OPPO.whole_groups and OPPO.group_size == 2


# ---- mutation-testing kills (docs/mutation.md)
def test_norm_penalty_by_hand():
    close(norm_penalty(torch.tensor([[3.0, 4.0], [0.0, 0.5]], dtype=torch.float64)), [16.0, 0.25])  # (5−1)², (0.5−1)²


def test_token_loss_spreads_each_pairs_step_one_over_its_two_responses():
    logp, hidden, batch = pair_batch()
    out = OPPO(context_dim=4, pref_coef=0.3, norm_coef=0.2)(logp, batch, hidden=hidden)
    # each row carries half its pair's step-1 value, spread evenly over its valid tokens: 2 pairs → Σ = 2·loss
    close(out.token_loss.sum(), 2 * out.loss.detach(), atol=1e-5)
    row = out.token_loss.sum(-1)
    close(row[[0, 3]], row[[1, 2]])  # the two sides of a pair (rows 0 and 1, rows 3 and 2) carry equal halves
    assert set(out.metrics) == {"rec_nll", "pref_loss", "norm_loss", "dist_chosen", "dist_rejected", "z_star_norm",
                                "pairs_used"}


def test_distance_adds_the_offset_and_norm_penalty_takes_one_vector():
    a = torch.tensor([1.0, 0.0], dtype=torch.float64)
    # ‖(1 + 1e-6, 1e-6)‖ = 1.000001 (to 1e-12); with − the offset it would be 0.999999
    close(context_distance(a, torch.zeros(2, dtype=torch.float64)), 1.000001, atol=1e-9)
    close(norm_penalty(torch.tensor([3.0, 4.0])), 16.0)  # one context: (5 − 1)²


def test_head_and_anchor_start_as_documented():
    logp, hidden, batch = pair_batch()  # hidden size d = 6
    a, b = OPPO(), OPPO()
    a(logp, batch, hidden=hidden), b(logp, batch, hidden=hidden)
    bound = 6 ** -0.5  # nn.Linear's uniform ±1/√d
    for p in (a._head.weight, a._head.bias):
        assert p.abs().max() <= bound and p.max() > bound / 2 and p.min() < -bound / 2
    assert not torch.equal(a._head.weight[0], a._head.weight[1])  # one draw per entry, not per column
    assert torch.equal(a._head.bias, b._head.bias)  # seeded
    assert 0.5 < float(a._z_star.detach().norm()) < 2.0  # z* ~ N(0, I/16): ‖z*‖ ≈ 1 (1.0153 for seed 0)


def test_adam_uses_the_configured_learning_rate():
    logp, hidden, batch = pair_batch()
    loss = OPPO(context_dim=4, lr=0.1)
    loss(logp, batch, hidden=hidden).loss.backward()
    before = loss._z_star.detach().clone()
    loss.after_update(batch, None)
    # Adam's first step moves each coordinate by lr·g/(|g| + 1e-8) ≈ ±lr
    close((loss._z_star.detach() - before).abs().max(), 0.1, atol=1e-4)


def test_error_messages_and_metric_dtypes():
    logp, hidden, batch = pair_batch()
    msg = ("policy_loss oppo reads the policy's last hidden states with gradient: call it as oppo(logp, batch, "
           "hidden=policy.forward_logp(..., hidden_layer=-1)['hidden_states'])")
    with pytest.raises(ValueError, match=re.escape(msg)):
        OPPO()(logp, batch)
    out = OPPO(context_dim=4)(logp, batch, hidden=hidden)
    assert out.metrics["pairs_used"].dtype == out.metrics["z_star_norm"].dtype == torch.float64  # logp's dtype
    del batch.extras["chosen"]
    with pytest.raises(ValueError, match=r"policy_loss oppo needs extras\['chosen'\]"):
        OPPO()(logp, batch, hidden=hidden)


def test_one_pair_is_not_halved_and_a_tied_pair_adds_nothing():
    logp, hidden, batch = pair_batch()
    first = torch.arange(2)
    one = OPPO(context_dim=4)(logp[first], batch.select(first), hidden=hidden[first])
    # one pair (P = 1): loss = step 1 of that pair = Σ token_loss (each row carries half of it)
    close(one.loss.detach(), one.token_loss.sum(), atol=1e-6)
    batch.extras["pair_valid"] = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    out = OPPO(context_dim=4)(logp, batch, hidden=hidden)
    close(out.loss.detach(), one.loss.detach() / 2, atol=1e-6)  # the same pair over P = 2, the tie adds 0
    assert out.token_loss[2:].abs().sum() == 0


def test_an_empty_batch_uses_no_pair():
    logp, hidden, batch = pair_batch()
    out = OPPO(context_dim=4)(logp[:0], batch.select(torch.arange(0)), hidden=hidden[:0])
    assert out.loss.item() == 0.0 and out.metrics["pairs_used"].item() == 0.0
