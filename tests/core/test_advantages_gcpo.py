import pytest
import torch

from polo.core.advantages.gcpo import GCPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close, length_batch

# the spec's group: G = 6, lengths in tokens
C = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
T = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
F = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
L = [450, 900, 1200, 300, 90, 600]


def gcpo_batch(c, t, f=None, lengths=None, group=None, present=None):
    """Rows of ``lengths`` valid tokens with reward components correct (and format when ``f`` is given)."""
    lengths = lengths or [1] * len(c)
    rewards = [[x] for x in c] if f is None else [[x, y] for x, y in zip(c, f)]
    batch = length_batch(rewards, lengths, group)
    batch.reward_names = ("correct",) if f is None else ("correct", "format")
    batch.extras["tag_used"] = torch.tensor(t, dtype=torch.float64)
    if present is not None:
        batch.extras["reward_present"] = torch.tensor(present)
    return batch


def first_token(result):
    return result.advantages[:, 0]


def test_worked_example():
    batch = gcpo_batch(C, T, F, L)
    reward, contrast, _ = GCPO().rewards(batch)
    close(contrast, [1.0] * 6)  # Δ = 2/3 − 1/3 > η
    close(reward, [2.25, 2.5, 1.5, 0.6667, 0.05, 1.8333])  # c + 0.5 f + 0.5 M t + 0.5 min(L, 900)/900
    close(first_token(GCPO()(batch)), [0.8290, 1.0936, 0.0353, -0.8467, -1.4993, 0.3881])


@pytest.mark.parametrize("c, sign", [([0.0, 0.0, 1.0, 1.0, 1.0, 0.0], -1.0), ([1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0.0)])
def test_worked_example_variants(c, sign):
    # Δ = −1/3: the tag costs w_tag where used; Δ = 0: no tag term at all
    batch = gcpo_batch(c, T, F, L)
    reward, contrast, _ = GCPO().rewards(batch)
    close(contrast, [sign] * 6)
    r_len = torch.tensor(L, dtype=torch.float64).clamp(max=900) / 900 * 0.5
    close(reward, torch.tensor(c) + 0.5 * torch.tensor(F) + 0.5 * sign * torch.tensor(T) + r_len)


def test_margin_is_strict():
    c, t = [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]  # Δ = 0.5 − 0 = 0.5
    close(GCPO(eta=0.5, format_reward=None).rewards(gcpo_batch(c, t))[1], [0.0] * 4)
    close(GCPO(eta=0.49, format_reward=None).rewards(gcpo_batch(c, t))[1], [1.0] * 4)


def test_no_contrast_when_everyone_or_no_one_uses_the_tag():
    for t in ([1.0] * 4, [0.0] * 4):
        close(GCPO(format_reward=None).rewards(gcpo_batch([1.0, 0.0, 0.0, 1.0], t))[1], [0.0] * 4)


def test_gates_pay_bonuses_only_on_correct_rows():
    batch = gcpo_batch(C, T, F, L)
    plain = GCPO().rewards(batch)[0]
    gated_tag = GCPO(gate_tag_on_correct=True).rewards(batch)[0]
    close(plain - gated_tag, [0.0, 0.0, 0.5, 0.0, 0.0, 0.0])  # row 3 used the tag and was wrong
    gated_len = GCPO(gate_len_on_correct=True).rewards(batch)[0]
    close(plain - gated_len, [0.0, 0.0, 0.5, 0.1667, 0.05, 0.0])


def test_without_format_reward():
    batch = gcpo_batch(C, T, lengths=L)  # no format column
    close(GCPO(format_reward=None).rewards(batch)[0], [1.75, 2.0, 1.0, 0.1667, 0.05, 1.3333])
    with pytest.raises(ValueError, match="no reward component 'format'"):
        GCPO()(batch)


def test_groups_are_contrasted_separately_in_any_order():
    # two copies of the example, the second with the first variant (M = −1), rows interleaved
    c2 = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    c = torch.tensor(C + c2)[order].tolist()
    t, f = torch.tensor(T + T)[order].tolist(), torch.tensor(F + F)[order].tolist()
    lengths, group = torch.tensor(L + L)[order].tolist(), torch.tensor([4] * 6 + [1] * 6)[order].tolist()
    got = first_token(GCPO()(gcpo_batch(c, t, f, lengths, group)))
    first = first_token(GCPO()(gcpo_batch(C, T, F, L)))
    second = first_token(GCPO()(gcpo_batch(c2, T, F, L)))
    close(got, torch.cat([first, second])[order])


def test_all_equal_group_and_single_sample():
    close(first_token(GCPO()(gcpo_batch([1.0] * 3, [0.0] * 3, [1.0] * 3))), [0.0] * 3)
    # a lone sample keeps A = R (as GRPO does): 1 + 0.5 + 0 + 0.5/900
    close(first_token(GCPO()(gcpo_batch([1.0], [1.0], [1.0]))), [1.5 + 0.5 / 900])


def test_missing_reward_makes_a_row_unscored():
    present = [[True, True]] * 5 + [[False, True]]
    result = GCPO()(gcpo_batch(C, T, F, L, present=present))
    assert result.keep.tolist() == [True] * 5 + [False]
    assert result.diagnostics["gcpo/unscored"] == 1.0
    expected = first_token(GCPO()(gcpo_batch(C[:5], T[:5], F[:5], L[:5])))  # the group without row 6
    close(first_token(result), [*expected.tolist(), 0.0])


def test_broadcast_over_tokens_and_zero_on_padding():
    a = GCPO()(gcpo_batch(C, T, F, L)).advantages
    assert a.shape == (6, 1200)
    lengths = torch.tensor(L)
    valid = torch.arange(1200)[None] < lengths[:, None]
    close(a, a[:, :1] * valid)  # the row's advantage on each of its tokens, 0 on padding


def test_bad_settings_and_inputs():
    with pytest.raises(ConfigError, match="tag_pattern.*regular expression"):
        ADVANTAGES.build({"name": "gcpo", "tag_pattern": "<aux("})
    with pytest.raises(ConfigError, match="l_max"):
        ADVANTAGES.build({"name": "gcpo", "l_max": 0})
    batch = gcpo_batch(C, T, F, L)
    del batch.extras["tag_used"]
    with pytest.raises(ValueError, match="input 'tag_used'"):
        GCPO()(batch)
    assert GCPO().needs() == {"tag_used"}


# ---- mutation-testing kills


def test_a_lone_user_or_non_user_counts_as_one_row_in_the_contrast():
    # U = {row 1} alone: Δ = 1/1 − 0/3 = 1 > η = 0.6 (a count floored at 2 would give 0.5 → M = 0)
    close(GCPO(eta=0.6, format_reward=None).rewards(gcpo_batch([1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]))[1],
          [1.0] * 4)
    # N = {row 4} alone: Δ = 2/3 − 1/1 = −1/3 < −η = −0.2 (N floored at 2: 2/3 − 1/2 = 1/6 → M = 0)
    close(GCPO(eta=0.2, format_reward=None).rewards(gcpo_batch([1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]))[1],
          [-1.0] * 4)


def test_negative_margin_is_strict():
    c, t = [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]  # Δ = 0 − 0.5 = −0.5
    close(GCPO(eta=0.5, format_reward=None).rewards(gcpo_batch(c, t))[1], [0.0] * 4)
    close(GCPO(eta=0.49, format_reward=None).rewards(gcpo_batch(c, t))[1], [-1.0] * 4)


def test_normalisation_adds_eps_to_the_std():
    # R = c = [1, 0] (no tag contrast: nobody uses it, lengths 1 → r_len = 0.5/900 each, cancels)
    # mean 0.5, unbiased std √0.5 = 0.70711; A = ±0.5 / (0.70711 + 1) = ±0.29289
    got = first_token(GCPO(eps=1.0, format_reward=None)(gcpo_batch([1.0, 0.0], [0.0, 0.0])))
    close(got, [0.29289, -0.29289])


def test_tag_metrics_count_bonus_and_penalty_rows_that_use_the_tag():
    # group 0: users correct → M = +1 (2 bonus rows); group 1: users wrong → M = −1 (2 penalty rows);
    # group 2: everyone uses the tag → M = 0 (3 tagged rows that are neither)
    c = [1.0, 1.0, 0.0, 0.0] + [0.0, 0.0, 1.0, 1.0] + [1.0, 0.0, 1.0]
    t = [1.0, 1.0, 0.0, 0.0] + [1.0, 1.0, 0.0, 0.0] + [1.0, 1.0, 1.0]
    group = [0] * 4 + [1] * 4 + [2] * 3
    result = GCPO(format_reward=None)(gcpo_batch(c, t, group=group))
    assert result.diagnostics["gcpo/tag_rate"] == pytest.approx(7 / 11)
    assert result.diagnostics["gcpo/tag_bonus_rows"] == 2.0
    assert result.diagnostics["gcpo/tag_penalty_rows"] == 2.0
    assert result.diagnostics["gcpo/unscored"] == 0.0
    assert result.keep is None  # every row scored: nothing to leave out


def test_an_empty_batch_reports_zero_metrics():
    batch = build_batch(torch.zeros(0, 1), mask=torch.zeros(0, 1))
    batch.reward_names = ("correct",)
    batch.extras["tag_used"] = torch.zeros(0, dtype=torch.float64)
    result = GCPO(format_reward=None)(batch)
    assert result.advantages.shape[0] == 0
    assert result.diagnostics == {"gcpo/tag_rate": 0.0, "gcpo/tag_bonus_rows": 0.0,
                                  "gcpo/tag_penalty_rows": 0.0, "gcpo/unscored": 0.0}


def test_a_bool_tag_input_and_float32_rewards_give_float32_advantages():
    batch = gcpo_batch(C, T, F, L)
    batch.rewards = batch.rewards.float()
    batch.extras["tag_used"] = torch.tensor(T, dtype=torch.float64)  # t converted to the mask's dtype
    reward, _, _ = GCPO().rewards(batch)
    assert reward.dtype == torch.float32
    assert GCPO()(batch).advantages.dtype == torch.float32
    batch.extras["tag_used"] = torch.tensor(T).bool()  # a bool tag input works too
    result = GCPO()(batch)
    close(first_token(result), [0.8290, 1.0936, 0.0353, -0.8467, -1.4993, 0.3881])
    assert result.diagnostics["gcpo/tag_rate"] == pytest.approx(0.5)


def test_length_bonus_is_computed_in_the_rewards_dtype():
    # float64 rewards: r_len = 0.5·300/900 = 1/6 exactly to float64 (float32 would be off by ~5e-9)
    reward = GCPO(format_reward=None).rewards(gcpo_batch([0.0], [0.0], lengths=[300]))[0]
    torch.testing.assert_close(reward, torch.tensor([0.5 * 300 / 900], dtype=torch.float64), atol=1e-12, rtol=0)


def test_an_unscored_rows_missing_components_count_as_zero_in_r():
    # row 2's correctness and row 1's format are missing: each counts 0 in R (nobody uses the tag here)
    present = [[True, False], [False, True]]
    reward, _, valid = GCPO().rewards(gcpo_batch([1.0, 1.0], [0.0, 0.0], [1.0, 1.0], present=present))
    assert valid.tolist() == [False, False]
    close(reward, [1.0 + 0.5 / 900, 0.5 + 0.5 / 900])  # c + 0.5·f + 0.5·1/900


def test_a_wrongly_shaped_tag_input_is_reported_with_its_shape():
    batch = gcpo_batch(C, T, F, L)
    batch.extras["tag_used"] = torch.ones(3)
    with pytest.raises(ValueError, match=r"must have shape \[B\] = \[6\], got \[3\]"):
        GCPO()(batch)
