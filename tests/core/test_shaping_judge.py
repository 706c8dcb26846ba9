import math

import pytest
import torch

from polo.core.registry import SHAPING

from .helpers import build_batch, close


def test_judge_score_is_the_reward_and_failures_score_zero():
    shaping = SHAPING.build({"name": "judge", "weight": 0.5})
    batch = build_batch([[1.0], [0.0], [1.0], [0.0]])
    batch.extras["judge_score"] = torch.tensor([0.25, math.nan, 0.9, math.inf], dtype=torch.float64)
    close(shaping(batch, max_new_tokens=8), [0.25, 0.0, 0.9, 0.0])
    assert shaping.needs() == {"judge_score"} and shaping.weight == 0.5 and shaping.max_value == math.inf
    # failed judgments are not scored: the trainer's reward_present column is False there
    assert shaping.present(batch).tolist() == [True, False, True, False]
    assert SHAPING.build("overlong").present(batch).all()


def test_a_missing_or_misshaped_score_is_refused():
    shaping = SHAPING.build("judge")
    batch = build_batch([[1.0], [0.0]])
    with pytest.raises(ValueError, match=r"'judge_score' must have shape \[B\] = \[2\], got None"):
        shaping(batch, 8)
    batch.extras["judge_score"] = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"got \[2, 3\]"):
        shaping(batch, 8)
