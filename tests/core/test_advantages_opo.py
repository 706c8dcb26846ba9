import torch

from polo.core.advantages.oblr_weighted_baseline import OBLRWeightedBaseline
from polo.core.advantages.opo import OPO

from .helpers import close, length_batch


def test_opo_is_the_length_weighted_group_mean():
    # lengths 10, 30, 20, 40, rewards 1, 0, 1, 0: b = (10·1 + 20·1)/100 = 0.3
    batch = length_batch([1.0, 0.0, 1.0, 0.0], [10, 30, 20, 40])
    close(OPO()(batch).advantages[:, 0], [0.7, -0.3, 0.7, -0.3])
    same = OBLRWeightedBaseline(proxy="length", leave_one_out=False)(batch).advantages
    close(OPO()(batch).advantages, same)
    assert OPO().needs() == set()


def test_opo_broadcasts_over_tokens_and_groups_are_separate():
    batch = length_batch([1.0, 0.0, 0.5, 0.5], [1, 3, 2, 2], group=[0, 0, 1, 1])
    adv = OPO()(batch).advantages
    close(adv[0], [0.75, 0.0, 0.0])  # b_0 = (1·1 + 3·0)/4 = 0.25
    close(adv[1], [-0.25, -0.25, -0.25])
    assert (adv[2:] == 0).all()  # equal rewards: A = 0


def test_singleton_and_zero_weight_groups_keep_raw_reward():
    batch = length_batch([0.6, 1.0, 0.0], [3, 0, 0], group=[4, 9, 9])
    adv = OPO()(batch).advantages
    assert torch.isfinite(adv).all()
    close(adv[0, 0], 0.6)
    assert (adv[1:] == 0).all()  # fully masked rows
