"""MBA's judge multi-reward: R = Σ_k w_k (s_k − 1)/9 from judge_scores [B, D], worked example and its trap."""
import math

import pytest
import torch

from polo.core.advantages.group import GRPO
from polo.core.registry import SHAPING, ConfigError

from .helpers import build_batch, close


def judged(scores, group=None):
    batch = build_batch([[0.0]] * len(scores), group)
    batch.extras["judge_scores"] = torch.tensor(scores, dtype=torch.float64)
    return batch


def test_worked_example():
    batch = judged([[8, 6], [5, 7], [3, 2]])
    term = SHAPING.build({"name": "judge_multi", "weights": [0.5, 0.5], "score_range": [1, 10],
                          "names": ["creativity", "feasibility"]})
    assert term.needs() == {"judge_scores"}
    r = term(batch, 8)
    close(r, [0.6667, 0.5556, 0.1667])
    close(GRPO().sequence_advantage(r, batch.group), [0.7759, 0.3527, -1.1285])
    metrics = term.after_update(batch, None)
    close(torch.tensor(metrics["judge_multi/creativity"]), (8 + 5 + 3 - 3) / 27)
    assert metrics["judge_multi/cancelled_groups"] == 0.0


def test_trap_the_criteria_cancel_and_the_metrics_say_so():
    batch = judged([[8, 4], [5, 7], [3, 9], [5, 5], [6, 6]], group=[0, 0, 0, 1, 1])
    term = SHAPING.build({"name": "judge_multi", "score_range": [1, 10]})  # default weights 1/D
    r = term(batch, 8)
    close(r[:3], [0.5556] * 3)
    close(GRPO().sequence_advantage(r, batch.group)[:3], [0.0, 0.0, 0.0])
    metrics = term.after_update(batch, None)
    assert set(metrics) == {"judge_multi/c0", "judge_multi/c1", "judge_multi/cancelled_groups"}
    assert metrics["judge_multi/cancelled_groups"] == 0.5  # group 0 cancels; group 1 is honestly flat


def test_failed_judgments_count_as_zero_and_prenormalised_scores_pass_through():
    batch = judged([[0.5, math.nan], [math.nan, math.nan], [1.0, 0.0]])
    term = SHAPING.build({"name": "judge_multi", "weights": [0.25, 0.75]})
    close(term(batch, 8), [0.125, 0.0, 0.25])
    assert term.present(batch).tolist() == [False, False, True]
    close(torch.tensor(term.after_update(batch, None)["judge_multi/c0"]), 0.75)  # mean over judged rows only


def test_bad_settings_and_inputs_are_named():
    with pytest.raises(ConfigError, match="score_range"):
        SHAPING.build({"name": "judge_multi", "score_range": [10, 1]})
    with pytest.raises(ConfigError, match="weights"):
        SHAPING.build({"name": "judge_multi", "weights": []})
    with pytest.raises(ConfigError, match="names has 1 entries but weights has 2"):
        SHAPING.build({"name": "judge_multi", "weights": [1, 1], "names": ["a"]})
    with pytest.raises(ValueError, match=r"weights has 3 entries but the judge scores 2 criteria"):
        SHAPING.build({"name": "judge_multi", "weights": [1, 1, 1]})(judged([[1, 1]]), 8)
    with pytest.raises(ValueError, match=r"'judge_scores' must have shape \[B, D\] with B = 1, got None"):
        SHAPING.build("judge_multi")(build_batch([[0.0]]), 8)


# ---- mutation-testing kills
def test_bad_judge_scores_name_their_shape_and_an_empty_criteria_list():
    term = SHAPING.build({"name": "judge_multi", "score_range": [1, 10]})
    with pytest.raises(ValueError, match=r"must have shape \[B, D\] with B = 2, got \[2\]"):
        term(judged([5.0, 6.0]), 8)  # one score per row: [B], not [B, D]
    with pytest.raises(ValueError, match=r"with B = 1, got \[2, 2\]"):
        term(_rows_mismatch(), 8)
    with pytest.raises(ValueError, match="^shaping judge_multi: input 'judge_scores' has no criteria$"):
        term(judged(torch.zeros(1, 0).tolist()), 8)
    close(term(judged([[10.0]]), 8), [1.0])  # one criterion is fine: (10 − 1)/9
    with pytest.raises(ValueError, match="^shaping judge_multi: names has 1 entries but the judge scores 2"):
        SHAPING.build({"name": "judge_multi", "names": ["a"]})(judged([[1, 1]]), 8)


def _rows_mismatch():
    batch = judged([[5.0, 6.0]])  # B = 1 ...
    batch.extras["judge_scores"] = torch.tensor([[5.0, 6.0], [1.0, 2.0]], dtype=torch.float64)  # ... 2 rows
    return batch


def test_a_criterion_judged_once_averages_over_one_row():
    batch = judged([[10.0, 4.0], [math.nan, 7.0]])
    metrics = SHAPING.build({"name": "judge_multi", "score_range": [1, 10]}).after_update(batch, None)
    assert metrics["judge_multi/c0"] == pytest.approx(1.0)  # (10 − 1)/9 over the one judged row (not / 2)
    assert metrics["judge_multi/c1"] == pytest.approx((3 / 9 + 6 / 9) / 2)


def test_cancelled_groups_count_groups_of_two_or_more_only():
    term = SHAPING.build({"name": "judge_multi", "score_range": [1, 10]})
    # group 0 (two rows) cancels: [8, 4] and [4, 8] both sum to 12, each criterion varies;
    # group 1 (two rows) is honestly flat: [5, 5] twice; group 2 is a singleton
    batch = judged([[8, 4], [4, 8], [5, 5], [5, 5], [9, 1]], group=[0, 0, 1, 1, 2])
    assert term.after_update(batch, None)["judge_multi/cancelled_groups"] == 0.5  # 1 of the 2 groups of size 2
    batch = judged([[8, 4], [4, 8], [9, 1]], group=[0, 0, 1])
    assert term.after_update(batch, None)["judge_multi/cancelled_groups"] == 1.0  # the singleton is left out
    singles = judged([[8, 4], [4, 8]], group=[0, 1])
    assert term.after_update(singles, None)["judge_multi/cancelled_groups"] == 0.0  # no group of two or more
