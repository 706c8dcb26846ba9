"""The HTTP judge against a real server: vLLM's OpenAI-compatible server (a subprocess) serving the warm-started
built-in model. Batched scoring, the chat endpoint, unparseable replies, timeouts, the cache, the concurrency
limit, and `polo train grpo` with the judge's score as a reward. (Nothing listening: test_judges.py and
tests/inputs/test_judge_inputs.py.)"""
import json
import logging
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.scale_out  # once per CI run: the torch thread count does not change them

from conftest import TINY  # noqa: E402
from polo.cli import main  # noqa: E402
from polo.roles.http_judge import EndpointClient  # noqa: E402
from polo.roles.base import ROLES  # noqa: E402
from polo.engines.base import Rollouts  # noqa: E402
from polo.inputs.base import PROVIDERS, ProviderContext  # noqa: E402
from polo.tasks import build_task  # noqa: E402
from polo.train.config import load_recipe  # noqa: E402
from polo.train.warm_start import ensure_warm_start  # noqa: E402

from tests.core.helpers import build_batch  # noqa: E402

SERVED = [*TINY, "model.tiny.num_heads=1"]
"""The served model: TINY's warm start with one attention head of 32 (vLLM's CPU attention needs ≥ 32)."""
NAME = "judge"
STARTUP_S = 240
DIGIT = {"template": "{prompt}", "score_pattern": r"(\d)", "score_range": (0, 9), "max_tokens": 4}
"""The built-in model answers arithmetic prompts with digits: its first digit, 0..9 → [0, 1], is the score."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(polo_cache, tmp_path_factory):
    """``http://127.0.0.1:PORT/v1`` of a vLLM OpenAI-compatible server on the warm-started built-in model."""
    recipe = load_recipe("grpo", SERVED)
    folder = ensure_warm_start(recipe, build_task(recipe.task), log=lambda *_: None)
    tmp = tmp_path_factory.mktemp("judge_server")
    # the char model has no chat template; the chat endpoint adds no special tokens itself, so the template gives bos
    (tmp / "chat.jinja").write_text("{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
    port = free_port()
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    log = (tmp / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--served-model-name",
         NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--seed", "0",
         "--chat-template", str(tmp / "chat.jinja")], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"the vLLM server exited ({process.returncode}):\n{(tmp / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/models", timeout=2) as reply:
                    if json.load(reply)["data"][0]["id"] == NAME:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server did not answer /v1/models within {STARTUP_S} s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def examples():
    return build_task(load_recipe("grpo", SERVED).task).examples("train", 10, seed=0)


def http_judge(server, **settings):
    return ROLES.build({"name": "judge", "backend": "http", "url": server, "model": NAME, **DIGIT, **settings},
                       "roles.judge").build(None)


def provide(judge, examples):
    ctx = ProviderContext(None, {"judge": judge}, None, None, {}, {"judge_score"})
    rollouts = Rollouts(build_batch([0.0] * len(examples)), [e.answer for e in examples], examples)
    return PROVIDERS.get("judge_score")(ctx, rollouts), ctx.metrics


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_batched_scoring_gives_a_number_for_every_sample(server, examples, endpoint):
    judge = http_judge(server, endpoint=endpoint, batch_size=4, concurrency=2)
    got, metrics = provide(judge, examples)
    scores = got["judge_score"]
    assert scores.isfinite().all() and ((scores >= 0) & (scores <= 1)).all(), scores
    assert metrics["judge/failures"] == 0 and got["judge_present"].tolist() == [1.0] * 10
    # completions: 10 prompts in requests of 4; chat: one conversation per request
    assert judge.scorer.client.requests == (3 if endpoint == "completions" else 10)


def test_replies_that_do_not_parse_are_counted_and_logged(server, examples, caplog):
    judge = http_judge(server, score_pattern="no such reply (\\d)")
    with caplog.at_level(logging.WARNING, logger="polo.inputs.judge_inputs"):
        got, metrics = provide(judge, examples)  # no exception
    assert got["judge_score"].isnan().all() and got["judge_present"].sum() == 0
    assert metrics == {"judge/failures": 10.0, "judge/failure_rate": 1.0, "judge/failures_unparseable": 10.0}
    assert "10 of 10 judgments failed (unparseable: 10)" in caplog.text and "does not give a score" in caplog.text


def test_a_tiny_timeout_fails_each_request_after_its_retries(server, examples):
    judge = http_judge(server, timeout_s=1e-4, retries=1, backoff_s=0.0, batch_size=5)
    got, metrics = provide(judge, examples)
    assert got["judge_score"].isnan().all() and metrics["judge/failures_timeout"] == 10.0
    assert judge.scorer.client.requests == 2 * 2  # 2 requests of 5 prompts, each tried twice


def test_the_cache_answers_a_repeated_request(server, examples, tmp_path):
    prompts = [e.prompt for e in examples]
    client = EndpointClient(server, NAME, batch_size=4, cache_file=tmp_path / "cache.jsonl")
    first = client.complete(prompts + prompts[:3])  # repeats inside one batch are sent once
    assert client.requests == 3 and all(r.text is not None for r in first)
    again = client.complete(prompts)
    assert client.requests == 3 and [r.text for r in again] == [r.text for r in first[:10]]
    reread = EndpointClient(server, NAME, batch_size=4, cache_file=tmp_path / "cache.jsonl")
    assert [r.text for r in reread.complete(prompts)] == [r.text for r in again] and reread.requests == 0
    uncached = EndpointClient(server, NAME, batch_size=4, cache=False)
    uncached.complete(prompts)
    uncached.complete(prompts)
    assert uncached.requests == 6


@pytest.mark.parametrize("concurrency", [1, 3])
def test_no_more_requests_in_flight_than_the_limit(server, examples, concurrency):
    client = EndpointClient(server, NAME, batch_size=1, concurrency=concurrency, cache=False, max_tokens=8)
    replies = client.complete([e.prompt for e in examples] * 2)
    assert all(r.text is not None for r in replies) and client.requests == 20
    assert 1 <= client.max_in_flight <= concurrency and client.in_flight == 0


def test_polo_train_with_the_http_judge_logs_its_failures(server, tiny, tmp_path):
    judge = ("{backend: http, url: '%s', model: %s, template: '{prompt}', score_pattern: '(\\d)', "
             "score_range: [0, 9]}" % (server, NAME))
    code = main(["train", "grpo", *tiny, "train.steps=2", "shaping=[{name: judge}]", f"roles.judge={judge}",
                 "--run-dir", str(tmp_path / "run")])
    assert code == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if row["step"] > 0]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["judge/failures"] == 0 and math.isfinite(row["reward/judge"]), row
