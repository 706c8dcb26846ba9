"""PRS: the progressive reward's worked example and the judged (long-form) quality stage."""
import math

import pytest
import torch

from polo.core.registry import SHAPING
from polo.core.shaping.prs import progressive_reward

from .helpers import build_batch, close


def test_progressive_reward_worked_example():
    f = torch.tensor([0.0, 0.5, 1.0, 1.0])
    q = torch.tensor([0.9, 0.9, 0.0, 0.6065])
    close(progressive_reward(f, q), [-1.0, -0.5, 0.0, 0.6065])
    with pytest.raises(ValueError, match="finite"):
        progressive_reward(torch.tensor([math.nan]), torch.tensor([0.0]))


def test_prs_judge_adds_the_judged_quality_to_complete_rows_only():
    # prs_format = f - 1 for f = 0, 0.5, 1, 1, 1; the judge scores out of 10, one judgment failed
    batch = build_batch([[-1.0], [-0.5], [0.0], [0.0], [0.0]])
    batch.reward_names = ("prs_format",)
    batch.extras["judge_score"] = torch.tensor([9.0, 9.0, 6.0, math.nan, 12.0], dtype=torch.float64)
    term = SHAPING.build({"name": "prs_judge", "max_score": 10.0})
    assert term.needs() == {"judge_score"}
    extra = term(batch, 8)
    close(extra, [0.0, 0.0, 0.6, 0.0, 1.0])
    close(batch.rewards[:, 0] + extra, [-1.0, -0.5, 0.6, 0.0, 1.0])  # PRS: -1 + f, else q
    assert term.present(batch).tolist() == [True, True, True, False, True]


def test_prs_judge_names_a_missing_format_column_and_bad_scale():
    batch = build_batch([[0.0]])
    batch.reward_names = ("correct",)
    batch.extras["judge_score"] = torch.tensor([0.5])
    with pytest.raises(ValueError, match="no reward component 'prs_format'"):
        SHAPING.build({"name": "prs_judge"})(batch, 8)
    with pytest.raises(ValueError, match="max_score"):
        SHAPING.build({"name": "prs_judge", "max_score": 0})


# ---- mutation-testing kills (docs/mutation.md)
def test_prs_judge_clips_a_negative_score_and_names_bad_shapes():
    batch = build_batch([[0.0], [0.0]])
    batch.reward_names = ("prs_format",)
    batch.extras["judge_score"] = torch.tensor([-3.0, 5.0], dtype=torch.float64)
    close(SHAPING.build({"name": "prs_judge", "max_score": 10.0})(batch, 8), [0.0, 0.5])  # q = clip(s/10, 0, 1)
    batch.extras["judge_score"] = torch.tensor([[0.5, 0.5]])
    with pytest.raises(ValueError, match=r"'judge_score' must have shape \[B\] = \[2\], got \[1, 2\]"):
        SHAPING.build("prs_judge")(batch, 8)
    del batch.extras["judge_score"]
    with pytest.raises(ValueError, match="got None"):
        SHAPING.build("prs_judge")(batch, 8)


def test_progressive_reward_refuses_nan_by_name():
    with pytest.raises(ValueError, match="^progressive_reward: f and q must be finite$"):
        progressive_reward(torch.tensor([math.nan]), torch.tensor([0.5]))
