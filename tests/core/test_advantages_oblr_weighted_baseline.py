import torch

from polo.core.advantages.oblr_weighted_baseline import OBLRWeightedBaseline
from polo.core.advantages.weighted_group_baseline import logit_grad_proxy, weighted_group_baseline

from .helpers import build_batch, close, length_batch


def test_length_weighted_leave_one_out_worked_example():
    # lengths 10, 30, 20, 40, rewards 1, 0, 1, 0: b_0 = (30·0 + 20·1 + 40·0)/90 = 2/9, A_0 = 7/9
    batch = length_batch([1.0, 0.0, 1.0, 0.0], [10, 30, 20, 40])
    close(OBLRWeightedBaseline(proxy="length")(batch).advantages[:, 0], [0.7778, -0.4286, 0.8750, -0.5000])
    # over the whole group: b = (10 + 20)/100 = 0.3
    all_j = OBLRWeightedBaseline(proxy="length", leave_one_out=False)(batch).advantages[:, 0]
    close(all_j, [0.7, -0.3, 0.7, -0.3])


def test_logit_gradient_proxy():
    # π = 0.9 with Σπ² = 0.82: 1 − 1.8 + 0.82 = 0.02; π = 0.5 with Σπ² = 0.30: 1 − 1 + 0.3 = 0.3
    proxy = logit_grad_proxy(torch.tensor([0.9, 0.5]).log(), torch.tensor([0.82, 0.30]), torch.ones(2))
    close(proxy, [0.0200, 0.3000])


def test_logit_grad_weights_from_old_logp_and_sum_pi_sq():
    old_logp = torch.tensor([[0.9, 0.5], [0.5, 0.5], [0.2, 0.9]], dtype=torch.float64).log()
    sum_pi_sq = torch.tensor([[0.82, 0.30], [0.5, 0.5], [0.3, 0.82]], dtype=torch.float64)
    batch = build_batch([1.0, 0.0, 0.0], mask=[[1, 1], [1, 1], [1, 0]], old_logp=old_logp)
    batch.extras["sum_pi_sq"] = sum_pi_sq
    est = OBLRWeightedBaseline()
    assert est.needs() == {"old_logp", "sum_pi_sq"}
    assert OBLRWeightedBaseline(proxy="length").needs() == set()
    w = torch.tensor([0.32, 1.0, 0.9], dtype=torch.float64)  # Σ_t m·(1 − 2π + Σπ²)
    close(est.weights(batch), w)
    expected = [1 - 0.0, 0 - 0.32 / 1.22, 0 - 0.32 / 1.32]
    close(est(batch).advantages[:, 0], expected)


def test_singleton_and_zero_weight_groups_keep_raw_reward():
    batch = length_batch([0.6, 1.0, 0.0], [3, 0, 0], group=[4, 9, 9])
    adv = OBLRWeightedBaseline(proxy="length")(batch).advantages
    assert torch.isfinite(adv).all()
    close(adv[0, 0], 0.6)
    assert (adv[1:] == 0).all()  # fully masked rows
    close(weighted_group_baseline(torch.tensor([1.0, 0.0]), torch.zeros(2), torch.tensor([0, 0]), False), [0, 0])


# ---- mutation-testing kills
def test_logit_grad_weights_take_the_masks_dtype():
    batch = build_batch([1.0, 0.0], mask=torch.ones(2, 1), old_logp=torch.log(torch.tensor([[0.5], [0.5]])))
    batch.rewards = batch.rewards.float()  # mask float32; old_logp and sum_pi_sq float64
    batch.extras["sum_pi_sq"] = torch.tensor([[0.5], [0.5]], dtype=torch.float64)
    adv = OBLRWeightedBaseline()(batch).advantages
    # ω = 1 − 2·0.5 + 0.5 = 0.5 each; leave-one-out baselines 0 and 1: A = 1, −1
    assert adv.dtype == torch.float32
    close(adv, [[1.0], [-1.0]])


def test_weights_summing_to_zero_give_a_zero_baseline():
    # ω = 1, −1 over the whole group: Σω = 0 → b = 0 (not Σ ωR / tiny)
    b = weighted_group_baseline(torch.tensor([1.0, 2.0]), torch.tensor([1.0, -1.0]), torch.tensor([0, 0]), False)
    assert b.tolist() == [0.0, 0.0]
