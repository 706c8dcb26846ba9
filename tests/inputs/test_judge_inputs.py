"""The judge's providers: scores, presence and the failure metrics of one step (causal judge on a tiny model,
and an endpoint with nothing listening for real failures)."""
import logging
import math
import socket

import pytest
import torch

from polo.roles.base import ROLES
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.base import Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks.base import Example

from tests.core.helpers import build_batch

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)
EXAMPLES = [Example("1+2=", "3"), Example("2+2=", "4"), Example("9+9=" * 15, "18")]  # the last: too long (64 positions)


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL)


def provide(judge, needs):
    ctx = ProviderContext(None, {"judge": judge}, None, None, {}, set(needs))
    rollouts = Rollouts(build_batch([0.0] * len(EXAMPLES)), ["3", "5", "18"], EXAMPLES)
    return PROVIDERS.get("judge_score")(ctx, rollouts), ctx.metrics


def test_scores_presence_and_failure_counts(policy, caplog):
    criteria = [{"name": "a", "template": "{prompt}{response}"}, {"name": "b", "template": "{response}={answer}"}]
    judge = ROLES.build({"name": "judge", "criteria": criteria}, "roles.judge").build(policy)
    with caplog.at_level(logging.WARNING, logger="polo.inputs.judge_inputs"):
        got, metrics = provide(judge, {"judge_score", "judge_scores"})
    scores = got["judge_scores"]
    assert scores.shape == (3, 2) and scores[:2].isfinite().all()
    assert scores[2].isnan().tolist() == [True, False]  # only criterion a reads the long prompt
    assert got["judge_present"].tolist() == [1.0, 1.0, 0.0]
    torch.testing.assert_close(got["judge_score"][:2], scores[:2].mean(-1))
    assert math.isnan(got["judge_score"][2])
    assert metrics == {"judge/failures": 1.0, "judge/failure_rate": 1 / 6, "judge/failures_too_long": 1.0}
    assert "1 of 6 judgments failed (too_long: 1)" in caplog.text


def test_an_unreachable_endpoint_is_counted_not_raised(policy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    role = ROLES.build({"name": "judge", "backend": "http", "url": f"http://127.0.0.1:{port}/v1", "model": "m",
                        "retries": 0}, "roles.judge")
    got, metrics = provide(role.build(policy), {"judge_score"})
    assert got["judge_score"].isnan().all() and got["judge_present"].tolist() == [0.0, 0.0, 0.0]
    assert "judge_scores" not in got
    assert metrics == {"judge/failures": 3.0, "judge/failure_rate": 1.0, "judge/failures_connection": 3.0}


def test_every_judge_input_comes_from_one_provider_that_needs_the_judge():
    providers = {PROVIDERS.get(n) for n in ("judge_score", "judge_scores", "judge_present")}
    assert len(providers) == 1 and providers.pop().roles == {"judge"}
