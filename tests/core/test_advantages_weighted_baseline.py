import torch

from polo.core.advantages.weighted_baseline import (
    OPO, OBLRWeightedBaseline, OptimalTokenBaseline, logit_grad_proxy, weighted_group_baseline,
)

from .helpers import build_batch, close


def length_batch(rewards, lengths, group=None, width=None):
    width = width or max(lengths)
    mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return build_batch(rewards, group, mask=mask)


def test_spec_19_weighted_baselines():
    batch = length_batch([1.0, 0.0, 1.0, 0.0], [10, 30, 20, 40])
    close(OBLRWeightedBaseline(proxy="length")(batch).advantages[:, 0], [0.7778, -0.4286, 0.8750, -0.5000])
    all_j = OBLRWeightedBaseline(proxy="length", leave_one_out=False)(batch).advantages[:, 0]
    close(all_j, [0.7, -0.3, 0.7, -0.3])
    close(OPO()(batch).advantages[:, 0], all_j)  # OPO = length weights over the whole group


def test_spec_19_logit_gradient_proxy():
    proxy = logit_grad_proxy(torch.tensor([0.9, 0.5]).log(), torch.tensor([0.82, 0.30]), torch.ones(2))
    close(proxy, [0.0200, 0.3000])


def test_logit_grad_weights_from_old_logp_and_sum_pi_sq():
    old_logp = torch.tensor([[0.9, 0.5], [0.5, 0.5], [0.2, 0.9]], dtype=torch.float64).log()
    sum_pi_sq = torch.tensor([[0.82, 0.30], [0.5, 0.5], [0.3, 0.82]], dtype=torch.float64)
    batch = build_batch([1.0, 0.0, 0.0], mask=[[1, 1], [1, 1], [1, 0]], old_logp=old_logp)
    batch.extras["sum_pi_sq"] = sum_pi_sq
    est = OBLRWeightedBaseline()
    assert est.needs() == {"old_logp", "sum_pi_sq"} and OPO().needs() == set()
    w = torch.tensor([0.32, 1.0, 0.9], dtype=torch.float64)  # Σ_t m·(1 − 2π + Σπ²)
    close(est.weights(batch), w)
    expected = [1 - 0.0, 0 - 0.32 / 1.22, 0 - 0.32 / 1.32]
    close(est(batch).advantages[:, 0], expected)


def test_singleton_and_zero_weight_groups_keep_raw_reward():
    batch = length_batch([0.6, 1.0, 0.0], [3, 0, 0], group=[4, 9, 9])
    for est in (OBLRWeightedBaseline(proxy="length"), OPO()):
        adv = est(batch).advantages
        assert torch.isfinite(adv).all()
        close(adv[0, 0], 0.6)
        assert (adv[1:] == 0).all()  # fully masked rows
    close(weighted_group_baseline(torch.tensor([1.0, 0.0]), torch.zeros(2), torch.tensor([0, 0]), False), [0, 0])


def otb_reference(returns, w, mask, group, eps=1e-8):
    base = torch.zeros_like(returns)
    for g in group.unique():
        rows = group == g
        if rows.sum() > 1:
            base[rows] = (returns[rows] * w[rows] * mask[rows]).sum(0) / ((w[rows] * mask[rows]).sum(0) + eps)
    return (returns - base) * mask


def test_optimal_token_baseline_matches_per_group_loop():
    torch.manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    group = torch.tensor([0, 1, 0, 1, 2])
    probs = torch.rand(5, 4, dtype=torch.float64) * 0.9 + 0.05
    sum_pi_sq = probs**2 + (1 - probs) ** 2 / 3  # the rest spread over 3 other tokens
    batch = build_batch([1.0, 0.0, 0.0, 1.0, 0.5], group, mask=mask, old_logp=probs.log())
    batch.extras["sum_pi_sq"] = sum_pi_sq
    m = mask.double()
    w = ((1 - 2 * probs + sum_pi_sq) * m).cumsum(-1)
    returns = batch.scalar_reward()[:, None] * m
    close(OptimalTokenBaseline()(batch).advantages, otb_reference(returns, w, m, group))
    # zero tail: row 2 is its group's unique longest (4 > 3), so its position 3 keeps the full return
    tail = OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages
    close(tail[2, 3], 0.0 - 0.0)
    close(tail[[0, 1, 3, 4]], OptimalTokenBaseline()(batch).advantages[[0, 1, 3, 4]])
    batch.rewards[2, 0] = 1.0
    close(OptimalTokenBaseline(handle_zero_tail=True)(batch).advantages[2, 3], 1.0)
    assert OptimalTokenBaseline()(batch).advantages[2, 3].abs() < 1e-6
