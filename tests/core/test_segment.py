import pytest
import torch

from polo.core.segment import group_stats, masked_mean, masked_whiten, run_start_rows, run_starts, segment_sum

from .helpers import close


def test_segment_sum_rows_and_empty_groups():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    close(segment_sum(x, torch.tensor([2, 0, 2])), [[3, 4], [0, 0], [6, 8]])
    assert segment_sum(x[:, 0], torch.tensor([0, 0, 0]), num_groups=3).tolist() == [9.0, 0.0, 0.0]


def test_group_stats_unsorted_ids_of_different_sizes():
    x = torch.tensor([1.0, 5.0, 2.0, 7.0, 4.0, 3.0, 9.0], dtype=torch.float64)
    group = torch.tensor([42, -3, 42, -3, 1000, 42, 8])  # sizes 3, 2, 1, 1; arbitrary, unsorted ids
    mean, std, count = group_stats(x, group)
    for i in range(len(x)):
        members = x[group == group[i]]
        if len(members) == 1:
            assert (mean[i], std[i], count[i]) == (0, 1, 1)
        else:
            close(mean[i], members.mean())
            close(std[i], members.std(unbiased=True))
            assert count[i] == len(members)


def test_group_stats_all_equal_group_has_zero_std():
    mean, std, _ = group_stats(torch.full((4,), 3.0), torch.tensor([5, 5, 5, 5]))
    assert mean.tolist() == [3.0] * 4 and std.tolist() == [0.0] * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_mean_all_and_per_row_with_empty_row(dtype):
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=dtype)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    close(masked_mean(x, mask), 1.5)
    close(masked_mean(x, mask, dim=-1), [1.5, 0.0])


def test_masked_whiten_worked_example_and_variance_modes():
    a = torch.tensor([[0.456725, 0.3755, 0.29, 0.2, 99.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    close(masked_whiten(a, mask)[:, :4], [[1.1418, 0.4067, -0.3670, -1.1815]])
    valid = a[0, :4]
    close(masked_whiten(a, mask, unbiased=False)[0, :4], (valid - valid.mean()) / valid.std(unbiased=False))


def test_masked_whiten_variance_floor_replaces_the_added_eps():
    # x = [0, 1e-4] (+ a masked entry): μ = 5e-5, population σ² = 2.5e-9
    x = torch.tensor([[0.0, 1e-4, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    close(masked_whiten(x, mask, unbiased=False, var_floor=1e-8)[0, :2], [-0.5, 0.5])  # 5e-5 / sqrt(1e-8)
    close(masked_whiten(x, mask, unbiased=False)[0, :2], [-0.4472, 0.4472])  # 5e-5 / sqrt(1.25e-8)
    close(masked_whiten(x, mask)[0, :2], [-0.4082, 0.4082])  # unbiased: 5e-5 / sqrt(5e-9 + 1e-8)
    y = torch.tensor([[1.0, 3.0]], dtype=torch.float64)  # σ² = 1 ≫ floor: the floor changes nothing
    close(masked_whiten(y, torch.ones(1, 2), unbiased=False, var_floor=1e-8), [[-1.0, 1.0]])
    assert (masked_whiten(torch.ones(1, 3), torch.ones(1, 3), unbiased=False, var_floor=1e-8) == 0).all()


@pytest.mark.parametrize("mask", [[[1, 0, 0]], [[0, 0, 0]]])
def test_masked_whiten_needs_two_entries(mask):
    with pytest.raises(ValueError):
        masked_whiten(torch.ones(1, 3), torch.tensor(mask))


def test_runs_of_equal_consecutive_ids():
    ids = torch.tensor([3, 3, 0, 0, 0, 3, 7])  # a later run of 3 is a new run
    assert run_starts(ids).tolist() == [True, False, True, False, False, True, True]
    assert run_start_rows(ids).tolist() == [0, 0, 2, 2, 2, 5, 6]
    assert run_start_rows(torch.tensor([], dtype=torch.long)).tolist() == []


# ---- mutation-testing kills (docs/mutation.md)
def test_segment_sum_of_no_rows_has_no_groups_and_whitening_one_entry_says_why():
    assert segment_sum(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)).shape == (0, 3)
    with pytest.raises(ValueError, match=r"^masked_whiten needs more than one valid entry, got 1$"):
        masked_whiten(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 0.0]]))
