"""Mutation-testing kills for the step-row input checks of polo/core/advantages/step_inputs.py."""
import pytest
import torch

from polo.core.advantages.step_inputs import constant_per, episode_reward, step_input, trajectories

from .helpers import build_batch


def test_bad_float_values_are_named_infinite_or_non_finite():
    batch = build_batch([0.0, 0.0])
    batch.extras["judge"] = torch.tensor([0.5, float("nan")])
    with pytest.raises(ValueError, match=r"'judge' \[2\] .*; it holds non-finite values$"):
        step_input(batch, "judge", "who")
    batch.extras["judge"] = torch.tensor([float("nan"), float("inf")])  # NaN allowed, inf not
    with pytest.raises(ValueError, match=r"; it holds infinite values$"):
        step_input(batch, "judge", "who", missing_ok=True)


def test_integer_rewards_give_episode_rewards_in_the_masks_dtype():
    batch = build_batch([0.0, 0.0])
    batch.rewards = torch.tensor([[2], [0]])  # int64: mask float32
    reward = episode_reward(batch, "who")
    assert reward.dtype == torch.float32 and reward.tolist() == [2.0, 0.0]


def test_no_rows_give_no_trajectories_and_a_split_trajectory_is_named():
    tinv, n_traj, groups = trajectories(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), "who")
    assert n_traj == 0 and tinv.numel() == 0 and groups.numel() == 0
    with pytest.raises(ValueError, match="^who: a trajectory id spans several groups .*every row of a trajectory "
                                         "must carry its task's group$"):
        trajectories(torch.tensor([7, 7]), torch.tensor([0, 1]), "who")


def test_constant_per_counts_an_empty_segment_and_the_smallest_integer():
    # segment 0 holds 1, 1 (constant); segment 1 is empty (constant by definition)
    assert constant_per(torch.tensor([1, 1]), torch.tensor([0, 0]), 2).tolist() == [True, True]
    smallest = torch.iinfo(torch.long).min
    assert constant_per(torch.tensor([smallest, smallest]), torch.tensor([0, 0]), 1).tolist() == [True]
