import pytest
import torch

from polo.core.advantages.dagrpo import DaGRPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close


def score_batch(scores, group=None, mask=None, **extras):
    """One-token rows whose judge score is ``scores`` (the scalar reward is unused by DaGRPO); no anchor and no
    correct row unless ``extras`` say so."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    batch = build_batch(torch.zeros(len(scores)), group, mask)
    batch.extras["judge_score"] = scores
    batch.extras.update({"anchor": torch.zeros(len(scores)), "correct": torch.zeros(len(scores))})  # no anchors
    batch.extras.update({k: torch.as_tensor(v, dtype=torch.float64) for k, v in extras.items()})
    return batch


def adv(estimator, scores, group=None, **extras):
    return estimator(score_batch(scores, group, **extras)).advantages[:, 0]


def test_worked_example_masks_the_close_pair():
    # |0.9 − 0.85| < 0.1 masks pair (1, 2); σ_s = 0.3987
    close(adv(DaGRPO(), [0.9, 0.85, 0.3, 0.1]), [1.1705, 1.0869, -0.7943, -1.4631])
    close(adv(DaGRPO(delta=0.0), [0.9, 0.85, 0.3, 0.1]), [1.2123, 1.0451, -0.7943, -1.4631])  # every pair kept


def test_worked_example_anchor_row_scores_one():
    # all-fail group; row 4 is the engine's anchor: its own score is ignored (here NaN) and read as 1.0;
    # masked pairs (1, 2) and (2, 3), while (1, 3) at exactly δ = 0.1 is kept
    scores = [0.2, 0.15, 0.1, float("nan")]
    result = DaGRPO()(score_batch(scores, anchor=[0, 0, 0, 1], correct=[0, 0, 0, 0]))
    close(result.advantages[:, 0], [-0.5465, -0.6636, -0.7807, 1.9908])
    assert result.keep is None
    assert result.diagnostics["dagrpo/anchors"] == 1.0
    assert result.diagnostics["dagrpo/groups_without_correct"] == 0.0  # the anchor counts as correct
    assert result.diagnostics["dagrpo/masked_pair_frac"] == pytest.approx(1 / 3)  # 2 of 6 pairs


def test_all_pairs_kept_is_grpo_times_g_over_g_minus_one():
    torch.manual_seed(0)
    scores = torch.rand(12, dtype=torch.float64)
    group = torch.tensor([7, 2, 7, 5, 2, 5, 7, 2, 5, 7, 2, 5])  # 3 groups of 4, ids in any order, interleaved
    grpo = ADVANTAGES.build("grpo")(build_batch(scores, group)).advantages[:, 0]
    close(adv(DaGRPO(delta=0.0), scores, group), 4 / 3 * grpo)


def test_matches_a_loop_over_groups_and_pairs():
    torch.manual_seed(1)
    scores = torch.rand(15, dtype=torch.float64).round(decimals=1)  # a 0.1 grid: gaps at δ exactly
    group = torch.arange(15) % 3
    est = DaGRPO(delta=0.2)
    got = adv(est, scores, group)
    for i in range(15):
        s = scores[group == group[i]]
        gaps = scores[i] - s
        kept = gaps.abs() >= 0.2 - 1e-9
        close(got[i], (gaps * kept).sum() / (4 * (s.std() + est.eps)))


def test_gap_rounded_below_delta_still_counts():
    # 0.3 − 0.2 = 0.09999999999999998 in float64: the pair is as distinct as δ = 0.1 says
    # kept: A = ±0.1 / (1 · σ_s), σ_s = 0.1/√2; masked it would be 0
    close(adv(DaGRPO(), [0.3, 0.2]), [2**0.5, -(2**0.5)])


def test_float32_scores_match_float64():
    scores = [0.9, 0.85, 0.3, 0.1]
    batch = build_batch(torch.zeros(4, dtype=torch.float32))
    batch.rewards = batch.rewards.float()
    batch.extras["judge_score"] = torch.tensor(scores, dtype=torch.float32)
    batch.extras["correct"] = torch.zeros(4)
    got = DaGRPO(anchors=False)(batch).advantages[:, 0]
    assert got.dtype == torch.float32
    close(got, [1.1705, 1.0869, -0.7943, -1.4631])


def test_score_from_a_reward_column():
    est = DaGRPO(score="reward:digit_match", anchors=False)
    assert est.needs() == {"correct"} and DaGRPO().needs() == {"judge_score", "correct", "anchor"}
    batch = build_batch([[1.0, 0.9], [0.0, 0.85], [0.0, 0.3], [0.0, 0.1]])
    batch.extras["correct"] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    batch.reward_names = ("correct", "digit_match")
    close(est(batch).advantages[:, 0], [1.1705, 1.0869, -0.7943, -1.4631])
    with pytest.raises(ValueError, match=r"no reward component 'tests_passed'.*correct, digit_match"):
        DaGRPO(score="reward:tests_passed", anchors=False)(batch)


def test_unscored_rows_leave_the_group():
    # a failed judge call (NaN) on row 2: the others are scored as a group of 3, row 2 gets 0 and no loss
    result = DaGRPO()(score_batch([0.9, float("nan"), 0.3, 0.1]))
    close(result.advantages[:, 0], [adv(DaGRPO(), [0.9, 0.3, 0.1])[0], 0.0, *adv(DaGRPO(), [0.9, 0.3, 0.1])[1:]])
    assert result.keep.tolist() == [True, False, True, True]
    assert result.diagnostics["dagrpo/unscored"] == 1.0
    # a reward that returned None is unscored the same way
    batch = build_batch([[0.9], [0.5], [0.3], [0.1]])
    batch.reward_names = ("partial",)
    batch.extras["reward_present"] = torch.tensor([[True], [False], [True], [True]])
    batch.extras["correct"] = torch.zeros(4)
    close(DaGRPO(score="reward:partial", anchors=False)(batch).advantages[:, 0], result.advantages[:, 0])


def test_all_equal_and_all_close_groups_give_zero():
    close(adv(DaGRPO(), [0.5, 0.5, 0.5, 0.5]), [0.0] * 4)
    close(adv(DaGRPO(), [0.50, 0.52, 0.55, 0.58]), [0.0] * 4)  # every pair closer than δ
    close(adv(DaGRPO(), [float("nan"), 0.3, float("nan"), float("nan")]), [0.0] * 4)  # one scored row: no pair


def test_group_sizes_are_checked():
    with pytest.raises(ValueError, match=r"groups of equal size, got sizes \[2, 3\]"):
        adv(DaGRPO(), [0.1, 0.2, 0.3, 0.4, 0.5], group=[0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="at least 2 rollouts per group.*samples_per_prompt"):
        adv(DaGRPO(), [0.1, 0.2], group=[0, 1])


def test_broadcast_over_tokens_and_zero_on_padding():
    batch = score_batch([0.9, 0.1], mask=[[1, 1, 0], [1, 0, 0]])
    a = DaGRPO()(batch).advantages
    close(a, [[a[0, 0], a[0, 0], 0.0], [a[1, 0], 0.0, 0.0]])
    assert a[0, 0] > 0 > a[1, 0]


def test_bad_inputs_are_named():
    with pytest.raises(ConfigError, match="reward:NAME"):
        ADVANTAGES.build({"name": "dagrpo", "score": "reward:"})
    with pytest.raises(ConfigError, match="delta"):
        ADVANTAGES.build({"name": "dagrpo", "delta": -0.1})
    with pytest.raises(ValueError, match="no input 'judge_score'"):
        DaGRPO()(build_batch([0.0, 1.0]))
    batch = score_batch([0.1, 0.2])
    batch.extras["judge_score"] = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"shape \[B\] = \[2\], got \[2, 3\]"):
        DaGRPO()(batch)


# ---- mutation-testing kills
def test_a_gap_exactly_at_delta_minus_the_tie_tolerance_is_kept():
    d = 0.1 - 1e-6  # the threshold δ − 1e-6 itself: |s_1 − s_0| = d exactly (0 subtracted)
    # kept: A = ±d / (1 · (σ + ε)), σ = d/√2 (unbiased, G = 2), ε = 1e-6; masked it would be 0
    expected = d / (d / 2**0.5 + 1e-6)
    close(adv(DaGRPO(), [0.0, d]), [-expected, expected], atol=1e-9)


def test_eps_is_added_to_a_std_smaller_than_itself():
    # δ = 0 keeps the pair; gap 1e-7, σ = 1e-7/√2: A = ±1e-7/(1e-7/√2 + 1e-6) = ±1/(1/√2 + 10)
    expected = 1 / (1 / 2**0.5 + 10)
    close(adv(DaGRPO(delta=0.0), [1e-7, 0.0]), [expected, -expected], atol=1e-9)


def test_float64_scores_give_the_masks_dtype_and_no_pair_reports_zero_masked():
    batch = score_batch([0.9, 0.3])
    batch.rewards = batch.rewards.float()  # mask float32, judge_score float64
    got = DaGRPO()(batch).advantages
    assert got.dtype == torch.float32
    close(got[:, 0], [2**0.5 * 0.6 / (0.6 + 2**0.5 * 1e-6), -(2**0.5) * 0.6 / (0.6 + 2**0.5 * 1e-6)])
    out = DaGRPO()(score_batch([float("nan"), float("nan")]))  # nothing scored: no pair compared
    assert out.diagnostics["dagrpo/masked_pair_frac"] == 0.0
