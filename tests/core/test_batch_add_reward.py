"""RolloutBatch.add_reward: one more reward component, its name, weight, maximum and scored rows; bad input named."""
import math

import pytest
import torch

from polo.core.batch import RolloutBatch


def make_batch(present: bool = True) -> RolloutBatch:
    extras = {"reward_present": torch.tensor([[True], [False], [True]])} if present else {}
    return RolloutBatch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.long),
                        torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.long), torch.tensor([0, 0, 1]),
                        torch.tensor([[1.0], [0.0], [2.0]]), reward_names=("correct",),
                        reward_weights=torch.tensor([1.0]), reward_max=torch.tensor([1.0]), extras=extras)


def test_a_column_with_its_name_weight_maximum_and_scored_rows():
    batch = make_batch()
    batch.add_reward("overlong", torch.tensor([0.0, -0.5, -1.0], dtype=torch.float64), 0.5, 0.0,
                     present=torch.tensor([True, True, False]))
    assert batch.reward_names == ("correct", "overlong")
    assert batch.rewards.dtype == torch.float32 and batch.rewards[:, 1].tolist() == [0.0, -0.5, -1.0]
    assert batch.reward_weights.tolist() == [1.0, 0.5] and batch.reward_max.tolist() == [1.0, 0.0]
    assert batch.extras["reward_present"].tolist() == [[True, True], [False, True], [True, False]]
    assert batch.scalar_reward().tolist() == [1.0, -0.25, 1.5]
    assert math.isnan(float(batch.reward_column("overlong")[2]))  # not scored: NaN to the metrics


def test_defaults_unbounded_and_every_row_scored():
    batch = make_batch()
    batch.add_reward("bonus", torch.ones(3), 1.0)
    assert batch.reward_max.tolist() == [1.0, math.inf] and batch.extras["reward_present"][:, 1].all()
    without = make_batch(present=False)
    without.add_reward("bonus", torch.ones(3), 1.0, present=torch.tensor([True, False, True]))
    assert "reward_present" not in without.extras  # the batch records no scored rows: none invented


def test_nan_values_are_kept_as_given():
    batch = make_batch()
    batch.add_reward("judge", torch.tensor([0.5, math.nan, 1.0]), 1.0)
    assert math.isnan(float(batch.rewards[1, 1])) and float(batch.rewards[0, 1]) == 0.5


@pytest.mark.parametrize("values, present, match", [
    (torch.ones(2), None, r"values has shape \[2\], expected \[B\] = \[3\]"),
    (torch.ones(3, 1), None, r"values has shape \[3, 1\]"),
    (torch.ones(3), torch.ones(4, dtype=torch.bool), r"present has shape \[4\]"),
])
def test_wrong_lengths_are_refused(values, present, match):
    with pytest.raises(ValueError, match=match):
        make_batch().add_reward("bonus", values, 1.0, present=present)


def test_a_duplicate_name_is_refused():
    batch = make_batch()
    with pytest.raises(ValueError, match="already has a reward component 'correct'"):
        batch.add_reward("correct", torch.ones(3), 1.0)
    assert batch.reward_names == ("correct",) and batch.rewards.shape == (3, 1)  # untouched
