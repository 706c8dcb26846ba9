import pytest
import torch

from polo.core.advantages.mc_grpo import MCGRPO

from .helpers import build_batch, close


@pytest.mark.parametrize(
    "rewards, expected, kept",
    [
        ([1.0, 0.0, 0.0], [1000.0, 0.0, 0.0], [0, 1]),  # G = 2
        ([0.9, 0.2, 0.5, 0.4, 0.7], [1.9900, -1.4925, 0.0, -0.4975, 0.9950], [0, 1, 3, 4]),
        ([1.0, 1.0, 0.0, 0.0, 1.0], [0.0, 0.0, -1000.0, -1000.0, 0.0], [1, 2, 3, 4]),
    ],
)
def test_worked_examples(rewards, expected, kept):
    out = MCGRPO()(build_batch(rewards))
    close(out.advantages[:, 0], expected)
    assert out.keep.nonzero().squeeze(-1).tolist() == kept


def test_mad_zero_frac_counts_the_samples_whose_group_has_mad_zero():
    # group 0: binary rewards, MAD 0 (|A| = 1/eps = 1000); group 1: MAD 0.2; group 2: a singleton, left out
    out = MCGRPO()(build_batch([1.0, 0.0, 0.0, 0.9, 0.2, 0.5, 0.4, 0.7, 0.3], group=[0, 0, 0, 1, 1, 1, 1, 1, 2]))
    assert out.diagnostics["mc_grpo/mad_zero_frac"] == 3 / 8
    assert out.advantages.abs().max() == pytest.approx(1000.0, rel=1e-6)


def test_pivot_matches_torch_median_per_group_and_scale_none():
    torch.manual_seed(0)
    rewards = torch.randint(0, 4, (21,)).double() / 3  # many ties
    group = torch.arange(21) % 3  # interleaved groups of 7
    out = MCGRPO(scale="none")(build_batch(rewards, group))
    for g in range(3):
        rows = (group == g).nonzero().squeeze(-1)
        median, index = rewards[rows].median(0)
        close(out.advantages[rows, 0], rewards[rows] - median)
        assert out.keep[rows].tolist() == [j != int(index) for j in range(7)]


def test_singleton_and_all_equal_groups():
    out = MCGRPO()(build_batch([0.4, 1.0, 1.0, 1.0], group=[5, 2, 2, 2]))
    close(out.advantages[:, 0], [0.4, 0.0, 0.0, 0.0])  # singleton: raw reward, kept
    assert out.keep.tolist() == [True, True, False, True]  # ties: the middle index is the pivot


def test_fully_masked_row_and_broadcast():
    out = MCGRPO()(build_batch([1.0, 0.0, 0.5], mask=[[1, 1], [0, 0], [1, 0]]))
    assert torch.isfinite(out.advantages).all() and (out.advantages[1] == 0).all()
    assert out.advantages[2, 1] == 0 and out.advantages[0, 0] == out.advantages[0, 1]


# ---- mutation-testing kills
def test_even_group_takes_the_lower_median():
    # G = 4: sorted 1, 2, 3, 10 → lower median 2 (rank (4 − 1) // 2 = 1); |r − 2| = 1, 0, 1, 8 → MAD 1
    result = MCGRPO()(build_batch([1.0, 2.0, 3.0, 10.0]))
    close(result.advantages[:, 0], [-1 / 1.001, 0.0, 1 / 1.001, 8 / 1.001])
    assert result.keep.tolist() == [True, False, True, True]  # the median sample is left out


def test_mad_zero_fraction_over_groups_of_two_or_more():
    flat = MCGRPO()(build_batch([1.0, 1.0, 0.0, 0.0], group=[0, 0, 1, 1]))
    assert flat.diagnostics["mc_grpo/mad_zero_frac"] == 1.0  # both groups flat: MAD 0
    singles = MCGRPO()(build_batch([1.0, 0.0], group=[0, 1]))
    assert singles.diagnostics["mc_grpo/mad_zero_frac"] == 0.0  # no group of two or more
