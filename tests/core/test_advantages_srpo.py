"""SRPO's advantage: GRPO (or Dr.GRPO) over the whole group, 0 on the rows routed to the self-teacher."""
import pytest
import torch

from polo.methods.srpo.advantage import SRPO, routed_to_teacher
from polo.core.registry import ConfigError, ADVANTAGES

from .helpers import build_batch, close


def batch(rewards, correct, group=None, mask=None):
    b = build_batch(rewards, group, mask=mask)
    b.extras["correct"] = torch.tensor(correct, dtype=torch.bool)
    return b


def test_worked_example_both_scales():
    # §2: r = [1, 1, 0]; GRPO (unbiased std, eps 1e-6) [0.5773, 0.5773, -1.1547], the failed row routed -> 0
    b = batch([1.0, 1.0, 0.0], [1, 1, 0], mask=torch.ones(3, 2))
    close(SRPO(scale="std")(b).advantages, [[0.5774] * 2, [0.5774] * 2, [0.0] * 2])
    # Dr.GRPO (the SDPO recipe's default): [1/3, 1/3, -2/3], the failed row routed -> 0
    close(SRPO()(b).advantages, [[0.3333] * 2, [0.3333] * 2, [0.0] * 2])


def test_routing():
    correct = torch.tensor([1, 0, 0, 0, 0, 1])
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    # group 0: the failed row has a correct sibling; group 1: nobody is correct; group 2: same as group 0
    assert routed_to_teacher(correct, group).tolist() == [False, True, False, False, True, False]


def test_all_failed_group_keeps_its_zero_advantage_and_all_correct_group_too():
    b = batch([0.0, 0.0, 1.0, 1.0], [0, 0, 1, 1], group=[0, 0, 1, 1])
    result = SRPO(scale="std")(b)
    close(result.advantages[:, 0], [0.0, 0.0, 0.0, 0.0])
    assert result.diagnostics["srpo/routed_frac"] == 0.0


def test_single_sample_group_keeps_its_reward_and_masked_tokens_are_zero():
    b = batch([0.7, 1.0, 0.0], [0, 1, 0], group=[0, 1, 1], mask=[[1, 0], [1, 1], [1, 0]])
    adv = SRPO(scale="std")(b).advantages
    close(adv, [[0.7, 0.0], [0.7071, 0.7071], [0.0, 0.0]])  # row 2 failed beside a correct row: routed


def test_nan_reward_propagates_to_its_group_except_routed_rows():
    b = batch([float("nan"), 1.0, 0.0, 1.0, 0.0], [1, 1, 0, 1, 0], group=[0, 0, 0, 1, 1])
    adv = SRPO()(b).advantages[:, 0]
    assert torch.isnan(adv[:2]).all()  # the group's mean is NaN: its GRPO-branch rows show it
    assert adv[2] == 0 and adv[4] == 0  # routed rows leave the GRPO branch whatever the mean
    assert adv[3] == 0.5


def test_registered_with_its_input_and_a_clear_error_for_a_bad_scale():
    assert ADVANTAGES.get("srpo") is SRPO and SRPO().needs() == {"correct"}
    with pytest.raises(ConfigError, match="scale"):
        ADVANTAGES.build({"name": "srpo", "scale": "mad"})
