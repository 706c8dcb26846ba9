"""The ELBO estimator (polo.core.elbo) and the gdpo_elbo loss: spec §18 worked example and edge cases."""
import math

import pytest
import torch

from polo.core.advantages.group import DrGRPO
from polo.core.aggregation import StepCounts
from polo.core.elbo import ElboSettings, elbo_layout, exact_k_masks, mask_counts, node_times, nodes
from polo.core.registry import AGGREGATIONS, POLICY_LOSSES
from tests.core.helpers import build_batch, close


def layout(quadrature="gauss-2", K=1, L=(4,), width=None, seed=0, response=None):
    width = width or max(L)
    mask = (torch.arange(width)[None] < torch.tensor(L)[:, None]).long()
    response = torch.arange(len(L) * width).view(len(L), width) % 50 + 4 if response is None else response
    prompt = torch.tensor([[1, 5, 6]] * len(L))
    return elbo_layout(ElboSettings(quadrature, K, seed), prompt, torch.ones_like(prompt), response, mask), mask


def elbo_of(lay, per_draw):
    """Row sums of the contributions when draw r's masked positions hold the values ``per_draw[r]`` in order."""
    B, R, T = lay.masked.shape
    logp = torch.zeros(B, R, T, dtype=torch.float64)
    for r, values in enumerate(per_draw):
        logp[0, r, lay.masked[0, r]] = torch.tensor(values, dtype=torch.float64)
    return lay.contributions(logp).sum(-1)


def test_rules():
    t, w = node_times("gauss-2", torch.zeros(1, dtype=torch.long), torch.tensor([4]))
    close(t[0], [0.2113, 0.7887])
    close(w[0], [0.5, 0.5])
    t, w = node_times("gauss-3", torch.zeros(1, dtype=torch.long), torch.tensor([4]))
    close(t[0], [0.1127, 0.5, 0.8873])
    close(w[0], [5 / 18, 8 / 18, 5 / 18])
    close(node_times("simpson", torch.zeros(1, dtype=torch.long), torch.tensor([4]))[1][0], [1 / 6, 4 / 6, 1 / 6])
    for name in ("gauss-1", "gauss-2", "gauss-3", "simpson", "uniform-5", "discrete-5"):  # weights integrate 1
        close(node_times(name, torch.arange(3), torch.tensor([4, 1, 7]))[1].sum(-1), [1.0] * 3)


def test_worked_example():
    lay, _ = layout()
    assert lay.masked.sum(-1).tolist() == [[1, 3]]
    new = elbo_of(lay, [[-0.5], [-1.2, -0.8, -2.0]])
    old = elbo_of(lay, [[-0.6], [-1.3, -0.9, -2.1]])
    close(new, [-3.7189])
    close(old, [-4.1457])
    close((new - old).exp(), [1.5323])


def test_loss_worked_example():
    # row 0 carries the example's ELBOs on one token; the others have ratio 1
    mask = torch.ones(4, 4)
    logp = torch.zeros(4, 4, dtype=torch.float64)
    old = torch.zeros(4, 4, dtype=torch.float64)
    logp[0, 0], old[0, 0] = -3.7189, -4.1457
    batch = build_batch([1.0, 0.0, 1.0, 1.0], mask=mask, old_logp=old)
    batch.advantages = DrGRPO()(batch).advantages
    close(batch.advantages[:, 0], [0.25, -0.75, 0.25, 0.25])
    out = POLICY_LOSSES.build("gdpo_elbo")(logp.requires_grad_(), batch)
    close(out.token_loss[0], [-0.0750] * 4)  # −min(1.5323·0.25, 1.2·0.25)/4 on every token
    close(out.token_loss[1], [0.75 / 4] * 4)
    agg = AGGREGATIONS.build("seq_mean_token_mean")(out.token_loss, batch.mask, StepCounts.from_mask(batch.mask, 4))
    close(agg, (-0.075 + 0.75 / 4 - 2 * 0.25 / 4) / 4)
    close(out.metrics["clip_frac_high"], 0.25)


def test_loss_gradient_and_kl():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logp = torch.tensor([[-1.0, -2.0, 5.0]], dtype=torch.float64, requires_grad=True)
    batch = build_batch([1.0], mask=mask, old_logp=[[-1.0, -2.0, 0.0]], ref_logp=[[-1.5, -2.0, 0.0]],
                        advantages=[[1.0, 1.0, 0.0]])
    loss = POLICY_LOSSES.build({"name": "gdpo_elbo", "beta": 0.1})
    assert loss.needs() == {"old_logp", "ref_logp"} and not loss.inert_at_zero_advantage
    out = loss(logp, batch)
    d = -0.5  # Ê_ref − Ê_θ
    close(out.token_loss[0, :2], [-1.0 / 2 + 0.1 * (math.exp(d) - d - 1)] * 2)
    assert out.token_loss[0, 2] == 0
    (out.token_loss * batch.mask).sum().backward()
    assert logp.grad[0, 2] == 0 and logp.grad[0, 0] == logp.grad[0, 1]  # padding gets no gradient
    assert POLICY_LOSSES.build("gdpo_elbo").needs() == {"old_logp"}


def test_loss_extreme_ratio_stays_finite():
    logp = torch.tensor([[80.0, 0.0], [-80.0, 0.0]], requires_grad=True)
    batch = build_batch([0.0, 1.0], mask=torch.ones(2, 2), old_logp=torch.zeros(2, 2),
                        ref_logp=torch.full((2, 2), 50.0), advantages=[[1.0, 1.0], [-1.0, -1.0]])
    out = POLICY_LOSSES.build({"name": "gdpo_elbo", "beta": 0.1})(logp, batch)
    (out.token_loss * batch.mask).sum().backward()
    assert torch.isfinite(out.token_loss).all() and torch.isfinite(logp.grad).all()


def test_exact_counts_edges():
    t = torch.tensor([[0.2113, 0.7887]], dtype=torch.float64)
    assert mask_counts(t, torch.tensor([1])).tolist() == [[1, 1]]  # L = 1: the one position, both nodes
    assert mask_counts(t, torch.tensor([0])).tolist() == [[0, 0]]  # empty row: nothing masked
    assert mask_counts(torch.tensor([[1.0]], dtype=torch.float64), torch.tensor([7])).tolist() == [[7]]  # all masked
    assert mask_counts(torch.tensor([[0.1]], dtype=torch.float64), torch.tensor([10])).tolist() == [[1]]


def test_all_masked_and_padding():
    keys = torch.tensor([[[5, 3, 9, 1]]])
    valid = torch.tensor([[1, 1, 1, 0]])
    assert exact_k_masks(keys, valid, torch.tensor([[3]])).int().tolist() == [[[1, 1, 1, 0]]]
    assert exact_k_masks(keys, valid, torch.tensor([[1]])).int().tolist() == [[[0, 1, 0, 0]]]
    lay, mask = layout("simpson", L=(1, 3), width=4)
    assert (lay.masked & ~mask.bool()[:, None]).sum() == 0  # padding is never masked
    assert lay.masked[0].sum(-1).tolist() == [1, 1, 1]
    assert lay.masked[1].sum(-1).tolist() == [1, 1, 3]  # t = 1 masks the whole response


def test_masks_follow_content_not_padding():
    a, _ = layout(L=(4, 4), response=torch.tensor([[7, 8, 9, 2], [7, 8, 9, 2]]))
    assert torch.equal(a.masked[0], a.masked[1])  # identical rows: identical masks
    padded = elbo_layout(ElboSettings(), torch.tensor([[0, 0, 1, 5, 6]]), torch.tensor([[0, 0, 1, 1, 1]]),
                         torch.tensor([[7, 8, 9, 2, 2, 2]]), torch.tensor([[1, 1, 1, 1, 0, 0]]))
    assert torch.equal(padded.masked[0, :, :4], a.masked[0])  # padding width does not move the masks
    other = [layout(L=(8,), seed=s)[0].masked for s in range(6)]
    assert len({tuple(m.flatten().tolist()) for m in other}) > 1  # the salt changes them


def test_uniform_times_in_range_and_k_copies():
    lay, _ = layout("uniform-16", K=2, L=(6,))
    assert lay.coef.shape == (1, 32) and (lay.coef > 0).all()
    t, _ = node_times("uniform-16", torch.arange(50), torch.full((50,), 6))
    assert (t > 0).all() and (t <= 1).all() and t.std() > 0.2
    assert nodes("uniform-3") == 3


def test_discrete_counts_are_uniform_in_1_to_L_with_weights_L_over_k():
    """LLaDA's estimator: k ~ U{1..L}, coefficient L/(k·M) on each draw's masked positions."""
    L = torch.tensor([5, 1])
    t, w = node_times("discrete-400", torch.arange(2), L)
    k = mask_counts(t, L)
    assert set(k[0].tolist()) == {1, 2, 3, 4, 5} and set(k[1].tolist()) == {1}
    lay, _ = layout("discrete-8", K=1, L=(5,))
    close(lay.coef[0] * lay.masked[0].sum(-1) * 8, [5.0] * 8)  # coef·k·M = L


@pytest.mark.parametrize("bad", ["gauss-4", "uniform-0", "uniform", "trapezoid"])
def test_bad_rule(bad):
    with pytest.raises(ValueError, match="quadrature"):
        ElboSettings(bad)


def test_bad_mc_samples():
    with pytest.raises(ValueError, match="mc_samples=0"):
        ElboSettings(mc_samples=0)


# ---- mutation-testing kills (docs/mutation.md)
def test_loss_divides_by_the_length_and_leaves_empty_rows_out_of_its_metrics():
    # rows of length 1, 0 and 2; r = 1 everywhere (logp = old_logp on valid tokens), so ℓ_i = −A_i/|y_i| + β·kl_i
    mask = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    logp = torch.tensor([[-1.0, 9.0], [7.0, 7.0], [-0.5, -1.5]], dtype=torch.float64)
    batch = build_batch([0.0] * 3, mask=mask, old_logp=logp.clone(), ref_logp=[[-2.0, 0.0], [0.0, 0.0], [-1.0, -1.0]],
                        advantages=[[2.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    out = POLICY_LOSSES.build({"name": "gdpo_elbo", "beta": 0.1})(logp, batch)
    # Ê = [−1, ·, −2]; d = Ê_ref − Ê_θ = [−1, ·, 0] → kl = [e⁻¹, ·, 0]
    close(out.token_loss, [[-2.0 + 0.1 * math.exp(-1.0), 0.0], [0.0, 0.0], [-0.5, -0.5]])
    close(out.metrics["elbo_mean"], -1.5)  # over the two non-empty rows
    close(out.metrics["kl_elbo"], math.exp(-1.0) / 2)
