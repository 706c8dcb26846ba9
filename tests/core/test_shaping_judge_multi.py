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
