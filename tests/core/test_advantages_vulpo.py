import math

import pytest
import torch

from polo.core.advantages.vulpo import VULPO
from polo.core.registry import ADVANTAGES, ConfigError

from .helpers import build_batch, close

NAN = math.nan
# the spec's three prompts, G = 3: A (vul), B (safe), C (safe)
V = [1, 1, 0, 1, 1, 0, 1, 1, 1]
LOC = [1, 0.5, 0, 0, 0, 0, 0, 0, 0]
SEM = LOC
F = [1, 1, 0, 1, 1, 1, 1, 1, 0]
Y = [1, 1, 1, 0, 0, 0, 0, 0, 0]
GROUP = [0, 0, 0, 1, 1, 1, 2, 2, 2]


def vulpo_batch(v=V, loc=LOC, sem=SEM, f=F, y=Y, group=GROUP, order=(0, 1, 2), mask=None):
    """One row per rollout: ``judge_scores`` with the three criteria in columns ``order``, the format reward,
    the prompt label."""
    batch = build_batch([[x] for x in f], group, mask)
    batch.reward_names = ("format",)
    columns = [None] * 3
    for value, position in zip((v, loc, sem), order):
        columns[position] = value
    batch.extras["judge_scores"] = torch.tensor(columns, dtype=torch.float64).T
    batch.extras["prompt_label"] = torch.tensor(y, dtype=torch.float64)
    return batch


def first_token(result):
    return result.advantages[:, 0]


def test_worked_example():
    result = VULPO()(vulpo_batch())
    close(first_token(result), [1.1259, 0.5926, -1.7185, 0.2074, 0.2074, -0.4148, 0.0, 0.0, 0.0])
    assert result.diagnostics["vulpo/lambda_vul"] == pytest.approx(4 / 3)
    assert result.diagnostics["vulpo/lambda_safe"] == pytest.approx(7 / 6)
    assert result.diagnostics["vulpo/degenerate_frac"] == pytest.approx(1 / 3)  # prompt C


def test_rewards_of_the_example_through_zero_scales():
    # α = 0: λ = μ = 1 (except degenerate prompts), so A is the mean-centred reward itself
    a = first_token(VULPO(alpha_label=0.0, alpha_sample=0.0)(vulpo_batch()))
    r = torch.tensor([1.0, 0.7, -0.6, 0.0, 0.0, -0.4])
    close(a[:6], torch.cat([r[:3] - r[:3].mean(), r[3:] - r[3:].mean()]))
    close(a[6:], [0.0] * 3)


def test_criteria_name_the_judge_columns():
    close(first_token(VULPO(criteria=(2, 0, 1))(vulpo_batch(order=(2, 0, 1)))), first_token(VULPO()(vulpo_batch())))


def test_verdict_probability_reads_as_right_from_one_half():
    v = [0.9, 0.6, 0.1, 0.5, 0.7, 0.49, 1.0, 0.8, 0.95]
    close(first_token(VULPO()(vulpo_batch(v=v))), first_token(VULPO()(vulpo_batch())))


def test_without_format_reward_no_penalty():
    batch = vulpo_batch()
    batch.reward_names = ("correct",)
    # f = 1 everywhere: A's rewards [1, 0.7, −0.4]; C still degenerate; μ_A = μ_B = 4/3, λ as before
    a = first_token(VULPO(format_reward=None)(batch))
    close(a[:3], 4 / 3 * 4 / 3 * (torch.tensor([1.0, 0.7, -0.4]) - 1.3 / 3))
    with pytest.raises(ValueError, match="no reward component 'format'"):
        VULPO()(batch)


def test_all_equal_and_single_rollout_groups_are_zero():
    # every rollout right (μ = 0) or every rollout wrong: no signal
    close(first_token(VULPO()(vulpo_batch(v=[1] * 3, loc=[1, 0, 0.5], sem=[1, 1, 0], f=[1] * 3, y=[1] * 3,
                                          group=[0] * 3))), [0.0] * 3)
    close(first_token(VULPO()(vulpo_batch(v=[0] * 3, loc=[0] * 3, sem=[0] * 3, f=[1, 0, 1], y=[0] * 3,
                                          group=[0] * 3))), [0.0] * 3)
    close(first_token(VULPO()(vulpo_batch(v=[1, 0], loc=[1, 0], sem=[1, 0], f=[1, 1], y=[1, 0], group=[0, 1]))),
          [0.0, 0.0])


def test_unscored_rows_leave_every_statistic():
    # judge failure on the third rollout of prompt A: A keeps 2 rows (p = 1 → degenerate), acc_vul = 1
    v = [1, 1, NAN, 1, 1, 0, 1, 1, 1]
    result = VULPO()(vulpo_batch(v=v))
    assert result.keep.tolist() == [True, True, False] + [True] * 6
    close(first_token(result)[:3], [0.0] * 3)
    assert result.diagnostics["vulpo/lambda_vul"] == pytest.approx(1.0)
    # loc / sem are read only where a vulnerable prompt's verdict is right: a NaN elsewhere is harmless
    loc = [1, 0.5, NAN, NAN, NAN, NAN, NAN, NAN, NAN]
    close(first_token(VULPO()(vulpo_batch(loc=loc, sem=loc))), first_token(VULPO()(vulpo_batch())))
    loc[1] = NAN
    assert VULPO()(vulpo_batch(loc=loc, sem=loc)).keep[1].item() is False


def test_order_of_rows_does_not_matter():
    order = torch.randperm(9, generator=torch.Generator().manual_seed(0))

    def pick(xs):
        return torch.tensor(xs, dtype=torch.float64)[order].tolist()

    group = torch.tensor([5, 5, 5, 0, 0, 0, 3, 3, 3])[order]  # ids in any order
    batch = vulpo_batch(pick(V), pick(LOC), pick(SEM), pick(F), pick(Y), group)
    close(first_token(VULPO()(batch)), first_token(VULPO()(vulpo_batch()))[order])


def test_broadcast_over_tokens_and_zero_on_padding():
    a = VULPO()(vulpo_batch(mask=[[1, 1, 0]] * 9)).advantages
    close(a, a[:, :1] * torch.tensor([1.0, 1.0, 0.0]))


def test_bad_settings_and_inputs():
    assert VULPO().needs() == {"judge_scores", "prompt_label"}
    with pytest.raises(ConfigError, match="alpha_label"):
        ADVANTAGES.build({"name": "vulpo", "alpha_label": -1})
    with pytest.raises(ValueError, match=r"criteria \[0, 1, 3\].*3 criteria"):
        VULPO(criteria=(0, 1, 3))(vulpo_batch())
    batch = vulpo_batch()
    batch.extras["judge_scores"] = batch.extras["judge_scores"][:, 0]
    with pytest.raises(ValueError, match=r"'judge_scores' must have shape \[B, D\]"):
        VULPO()(batch)
    batch = vulpo_batch()
    del batch.extras["prompt_label"]
    with pytest.raises(ValueError, match="'prompt_label' must have shape"):
        VULPO()(batch)


def test_verdict_from_a_reward_column():
    batch = vulpo_batch(v=[0.0] * 9)  # the judge's verdicts all wrong; the verifier's are the example's
    batch.rewards = torch.cat([batch.rewards, torch.tensor(V, dtype=torch.float64)[:, None]], 1)
    batch.reward_names = ("format", "verdict_ok")
    close(first_token(VULPO(verdict_reward="verdict_ok")(batch)), first_token(VULPO()(vulpo_batch())))
    assert not first_token(VULPO()(batch)).any()  # every verdict wrong: every group degenerate


def test_negative_criteria_columns_are_refused():
    with pytest.raises(ConfigError, match="criteria"):
        ADVANTAGES.build({"name": "vulpo", "criteria": [0, -1, 2]})


# ---- mutation-testing kills (docs/mutation.md)
def test_reward_mean_of_the_worked_example():
    # r = [1.0, 0.7, −0.6 | 0, 0, −0.4 | 0, 0, −0.2] (A's explained verdicts, B's wrong one, C's format miss):
    # the group mean cancels a constant shift of r, the reported mean does not
    result = VULPO()(vulpo_batch())
    assert result.diagnostics["vulpo/reward_mean"] == pytest.approx(0.5 / 9)
    assert result.keep is None and result.diagnostics["vulpo/unscored"] == 0.0  # every row scored


def test_unscored_count_and_a_batch_with_no_scored_row():
    result = VULPO()(vulpo_batch(v=[1, 1, NAN, 1, 1, 0, 1, 1, 1]))
    assert result.diagnostics["vulpo/unscored"] == 1.0
    none = VULPO()(vulpo_batch(v=[NAN] * 9))
    assert not none.keep.any() and not first_token(none).any()
    assert none.diagnostics["vulpo/reward_mean"] == 0.0 and none.diagnostics["vulpo/unscored"] == 9.0


def test_an_explained_row_needs_both_loc_and_sem():
    # A's first rollout is a right verdict on a vulnerable prompt: it reads loc and sem, so a missing sem unscores it
    sem = [NAN, 0.5, 0, 0, 0, 0, 0, 0, 0]
    assert VULPO()(vulpo_batch(sem=sem)).keep.tolist() == [False] + [True] * 8


def test_label_accuracy_of_a_label_with_one_rollout():
    # one vulnerable rollout, right (acc_vul = 1 → λ_vul = 1) and one safe rollout, wrong (acc_safe = 0 → λ_safe = 2)
    diagnostics = VULPO()(vulpo_batch(v=[1, 0], loc=[1, 0], sem=[1, 0], f=[1, 1], y=[1, 0], group=[0, 1])).diagnostics
    assert (diagnostics["vulpo/lambda_vul"], diagnostics["vulpo/lambda_safe"]) == (1.0, 2.0)


def test_advantages_take_the_masks_dtype():
    batch = vulpo_batch()
    batch.rewards = batch.rewards.float()  # float32 mask; the judge's scores stay float64
    assert VULPO()(batch).advantages.dtype == torch.float32


def test_shape_errors_say_what_they_got():
    batch = vulpo_batch()
    batch.extras["judge_scores"] = batch.extras["judge_scores"][:, 0]
    with pytest.raises(ValueError, match=r"got \[9\]"):
        VULPO()(batch)
    del batch.extras["judge_scores"]
    with pytest.raises(ValueError, match="got None"):
        VULPO()(batch)
    batch = vulpo_batch()
    batch.extras["prompt_label"] = batch.extras["prompt_label"][:, None]
    with pytest.raises(ValueError, match=r"got \[9, 1\]"):
        VULPO()(batch)


def test_an_empty_batch_reports_zero_degenerate_groups():
    result = VULPO()(vulpo_batch(v=[], loc=[], sem=[], f=[], y=[], group=[]))
    assert result.advantages.numel() == 0 and result.diagnostics["vulpo/degenerate_frac"] == 0.0
