"""Shared multi-turn primitives: group_norm (modes, std kinds, singleton policies), discounted returns, anchor ids."""
import pytest
import torch

from polo.core.agent_primitives import (anchor_ids, check_steps, discounted_returns, group_moments, group_norm,
                                        text_similarity)
from polo.core.segment import group_stats

from .helpers import close

# The gigpo_basic rollouts of the multi-turn spec (§3 d): three trajectories of one task, γ = 0.95.
TRAJ = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
STEP = [0, 1, 2, 0, 1, 2, 3, 0, 1, 2]
STEP_REWARD = [0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
RETURNS = [0.9025, 0.95, 1.0, 0.857375, 0.9025, 0.95, 1.0, 0, 0, 0]


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


# ---------------------------------------------------------------- group_norm


def test_group_norm_modes_and_std_kinds():
    x, g = t([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long)
    close(group_norm(x, g, "mean"), [0.75, -0.25, -0.25, -0.25])
    close(group_norm(x, g, "mean_std"), [1.5, -0.5, -0.5, -0.5])  # std_u = 0.5
    close(group_norm(x, g, "mean_std", std_kind="population"), [1.7321, -0.5774, -0.5774, -0.5774])  # std_p = √3/4


def test_group_norm_matches_grpo_group_stats_on_unsorted_ids():
    x = t([1.0, 0.3, 0.0, 2.0, 0.5, -1.0, 4.0])
    g = torch.tensor([7, 2, 7, 2, 7, 2, 11])
    mean, std, count = group_stats(x, g)
    close(group_norm(x, g, "mean_std"), (x - mean) / (std + 1e-6))
    m2, s2, c2 = group_moments(x, g)
    close(m2, mean), close(s2, std), close(c2, count)


@pytest.mark.parametrize("mode", ["mean", "mean_std"])
def test_singleton_policies(mode):
    x, g = t([0.7, -2.0, 1.0, 3.0]), torch.tensor([3, 9, 5, 5])
    raw = group_norm(x, g, mode, singleton="zero_mean_unit_std")  # verl GRPO: a lone sample keeps its value
    close(raw[:2], [0.7, -2.0])
    own = group_norm(x, g, mode, singleton="self_mean")  # GiGPO step groups: a lone step gets 0
    assert (own[:2] == 0).all()
    close(own[2:], raw[2:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("singleton", ["zero_mean_unit_std", "self_mean"])
def test_all_equal_groups_give_exactly_zero(dtype, singleton):
    # Seven float32 0.1s sum to a value whose /7 is not 0.1: the shifted mean makes the result exact anyway.
    x = torch.tensor([0.95, 0.95, 0.95, 0.1] * 1 + [0.1] * 6 + [1 / 3] * 5, dtype=dtype)
    g = torch.tensor([0, 0, 0] + [1] * 7 + [2] * 5)
    for mode in ("mean", "mean_std"):
        assert (group_norm(x, g, mode, singleton=singleton) == 0).all()


def test_members_restrict_the_statistics_but_every_row_is_normalized():
    x, g = t([1.0, 5.0, 3.0, 2.0]), torch.zeros(4, dtype=torch.long)
    members = torch.tensor([True, False, True, False])
    close(group_norm(x, g, "mean", members=members), [-1.0, 3.0, 1.0, 0.0])  # mean of {1, 3} = 2
    mean, std, count = group_moments(x, g, members)
    close(std, [2 ** 0.5] * 4), close(count, [2.0] * 4)


def test_group_norm_refuses_unknown_settings():
    x, g = t([1.0, 2.0]), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="mode"):
        group_norm(x, g, "median")
    with pytest.raises(ValueError, match="singleton"):
        group_norm(x, g, singleton="drop")
    with pytest.raises(ValueError, match=r"\[N\]"):
        group_norm(x[:, None], g)


# ---------------------------------------------------------------- discounted returns


def test_discounted_returns_worked_example_in_any_row_order():
    r, traj, step = t(STEP_REWARD), torch.tensor(TRAJ), torch.tensor(STEP)
    close(discounted_returns(r, traj, step, 0.95), RETURNS)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(3))
    close(discounted_returns(r[perm], traj[perm] * 7 + 100, step[perm], 0.95), t(RETURNS)[perm])


def test_discounted_returns_recursion_and_extreme_gammas():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(6, generator=g, dtype=torch.float64)
    traj, step = torch.zeros(6, dtype=torch.long), torch.arange(6)
    G = discounted_returns(r, traj, step, 0.9)
    close(G[:-1], r[:-1] + 0.9 * G[1:]), close(G[-1], r[-1])
    close(discounted_returns(r, traj, step, 0.0), r)
    close(discounted_returns(r, traj, step, 1.0), r.flip(0).cumsum(0).flip(0))


def test_discounted_returns_float32_on_50_step_episodes(f32):
    # 64 trajectories of 1..50 turns, shuffled; float64 recursion as the reference. Each return is a sum of
    # at most 50 discounted terms, so float32 stays within a few ulps·√50 of the largest partial sum.
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 51, (64,), generator=g)
    lengths[0] = 50
    traj = torch.repeat_interleave(torch.arange(64), lengths)
    step = torch.cat([torch.arange(int(n)) for n in lengths])
    r = torch.randn(len(traj), generator=g, dtype=torch.float64)
    perm = torch.randperm(len(traj), generator=g)
    traj, step, r = traj[perm], step[perm], r[perm]
    for gamma in (0.95, 0.5, 0.01, 1.0):
        ref = discounted_returns(r, traj, step, gamma)
        got = discounted_returns(r.float(), traj, step, gamma)
        bound = discounted_returns(r.abs(), traj, step, gamma).max()  # Σ γ^{k−t}|r_k|
        torch.testing.assert_close(got.double(), ref, atol=f32.atol(bound, terms=50), rtol=0)
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("step, match", [([0, 0, 1], "exactly once"), ([0, 2, 1], "exactly once"),
                                         ([0, 1, 3], "0..T−1"), ([-1, 0, 1], "≥ 0")])
def test_discounted_returns_refuses_bad_step_indices(step, match):
    traj = torch.tensor([5, 5, 9]) if step == [0, 2, 1] else torch.tensor([5, 5, 5])
    with pytest.raises(ValueError, match=match):
        discounted_returns(t([1.0, 0.0, 0.0]), traj, torch.tensor(step), 0.9)


def test_check_steps_refuses_float_ids():
    with pytest.raises(ValueError, match="integer"):
        check_steps(t([0.0, 0.0]), torch.tensor([0, 1]))


# ---------------------------------------------------------------- anchor ids


def test_anchor_ids_exact_and_similarity_first_fit():
    texts = ["at door", "at desk", "at door", "room A", "room B", "at door"]
    groups = [0, 0, 0, 1, 1, 1]
    exact = anchor_ids(texts, groups)
    assert exact[0] == exact[2] and len(set(exact)) == 5 and exact[5] != exact[0]  # groups never share an id
    similar = anchor_ids(texts, groups, similarity_thresh=0.8)
    # "at desk" vs "at door": ratio 8/14 < 0.8 → own cluster; "room B" vs "room A": 10/12 ≥ 0.8 → joins
    assert similar[0] == similar[2] and similar[1] != similar[0] and similar[3] == similar[4]
    assert similar[5] not in (similar[0], similar[1])


def test_anchor_ids_compare_with_the_first_member_only():
    # "abcd" leads; "abcx" joins (0.75); "abxx" is 0.5 from the leader though 0.75 from "abcx": new cluster.
    ids = anchor_ids(["abcd", "abcx", "abxx"], similarity_thresh=0.7)
    assert ids[0] == ids[1] and ids[2] != ids[0]


def test_text_similarity_is_the_better_of_difflibs_two_orders():
    # Issue 36's pair: difflib gives 0.8 with "dchbededac" first and 0.7 with it second.
    a, b = "dchbededac", "gchbedecdc"
    assert text_similarity(a, b) == text_similarity(b, a) == pytest.approx(0.8)


@pytest.mark.parametrize("texts", [["dchbededac", "gchbedecdc"], ["gchbedecdc", "dchbededac"]])
def test_anchor_ids_merge_a_one_way_similar_pair_in_either_arrival_order(texts):
    ids = anchor_ids(texts, [0, 0], similarity_thresh=0.8)
    assert ids[0] == ids[1]
    assert anchor_ids(texts, [0, 0], similarity_thresh=0.81) == [0, 1]


def test_anchor_ids_group_the_same_way_whatever_order_the_rows_arrive_in():
    # Arrival-order first-fit would let "abxx" lead and take "abcx" (0.75) when it comes first; leaders are
    # visited most frequent first, ties by text, so "abcd" leads and takes "abcx" in every order.
    for texts in (["abxx", "abcx", "abcd"], ["abcx", "abxx", "abcd"], ["abcd", "abxx", "abcx"]):
        ids = dict(zip(texts, anchor_ids(texts, similarity_thresh=0.7)))
        assert ids["abcd"] == ids["abcx"] != ids["abxx"], texts
    # The most frequent text leads: "abxx" twice makes it the leader that "abcx" joins.
    ids = anchor_ids(["abcd", "abcx", "abxx", "abxx"], similarity_thresh=0.7)
    assert ids[1] == ids[2] == ids[3] != ids[0]
