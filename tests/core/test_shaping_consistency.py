"""Con-GRPO's consistency term r_con·r_fmt (``consistency_judge``) on hand-made judge scores."""
import math

import pytest
import torch

import polo.core.shaping  # noqa: F401  (registers)
from polo.core.registry import SHAPING, ConfigError

from .helpers import build_batch, close


def judged(scores, formatted):
    batch = build_batch([[f] for f in formatted])
    batch.reward_names = ("think_answer_format",)
    batch.extras["judge_score"] = torch.tensor(scores, dtype=torch.float64)
    return batch


def test_binary_and_soft_consistency_on_formatted_rows_only():
    batch = judged([0.5, 0.49, 1.7, -0.2, 0.9, math.nan], [1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    # binary: 1[p ≥ 0.5]; soft: clip(p, 0, 1); a malformed row (r_fmt = 0) and a failed judgment score 0
    close(SHAPING.build("consistency_judge")(batch, 8), [1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    soft = SHAPING.build({"name": "consistency_judge", "mode": "soft"})
    close(soft(batch, 8), [0.5, 0.49, 1.0, 0.0, 0.0, 0.0])
    assert soft.present(batch).tolist() == [True] * 5 + [False]  # the malformed row is present (0 by definition)
    assert soft.needs() == {"judge_score"}


def test_bad_judge_scores_are_named():
    batch = judged([0.5], [1.0])
    batch.extras["judge_score"] = torch.tensor([[0.5]])
    with pytest.raises(ValueError, match=r"'judge_score' must have shape \[B\] = \[1\], got \[1, 1\]"):
        SHAPING.build("consistency_judge")(batch, 8)
    del batch.extras["judge_score"]
    with pytest.raises(ValueError, match="got None"):
        SHAPING.build("consistency_judge")(batch, 8)


def test_model_judge_term_binary_and_soft():
    batch = judged([0.9, 0.2, 0.9, math.nan, 0.5], [1.0, 1.0, 0.0, 1.0, 1.0])
    term = SHAPING.build({"name": "consistency_judge", "weight": 1.0})
    assert term.needs() == {"judge_score"}
    close(term(batch, 8), [1.0, 0.0, 0.0, 0.0, 1.0])
    assert term.present(batch).tolist() == [True, True, True, False, True]
    soft = SHAPING.build({"name": "consistency_judge", "mode": "soft"})
    close(soft(batch, 8), [0.9, 0.2, 0.0, 0.0, 0.5])


def test_model_judge_term_errors():
    with pytest.raises(ConfigError, match="mode"):
        SHAPING.build({"name": "consistency_judge", "mode": "hard"})
    batch = judged([0.5], [1.0])
    batch.reward_names = ("correct",)
    with pytest.raises(ValueError, match="no reward component 'think_answer_format'"):
        SHAPING.build("consistency_judge")(batch, 8)
    batch = build_batch([[1.0]])
    batch.reward_names = ("think_answer_format",)
    with pytest.raises(ValueError, match=r"'judge_score' must have shape \[B\] = \[1\], got None"):
        SHAPING.build("consistency_judge")(batch, 8)
