"""The judge role's back ends without a server: templates, the causal verdict probability against a direct
forward, the classifier back end, criteria → [B, D], per-sample failures and the role's validation.
(The HTTP back end against a real server: tests/policy/test_judge_http.py.)"""
import copy
import http.server
import math
import re
import socket
import threading

import pytest
import torch

from polo.core.registry import ConfigError
from polo.roles.http_judge import EndpointClient, parse_score
from polo.roles.judge import Judge, JudgeRole, Scored, render
from polo.policy.reward_model import RewardModel
from polo.roles.base import ROLES
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.policy.tokenizer import build_char_tokenizer
from polo.tasks.base import Example

SMALL = TinyModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)
EXAMPLES = [Example("12+3=", "15"), Example("4*2=", "8", {"rubric": "exact"}), Example("7-7=", "0")]
COMPLETIONS = ["15", "9", "0 "]
SCORE_ATOL = 1e-5
"""The judge computes float32 log-softmaxes of a float64 model's logits: each verdict's summed log-prob (4 tokens
of magnitude ≤ ~10) is off by a few float32 ulps (~1e-6), and σ' ≤ 1/4 shrinks that in the score."""


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(SMALL).double()


def judge(**settings):
    return ROLES.build({"name": "judge", **settings}, "roles.judge")


def direct_score(policy, text, verdicts):
    """p(yes)/(p(yes) + p(no)) from one unbatched forward of text ⊕ verdict per verdict."""
    context = policy.tokenizer(text)["input_ids"]
    logp = []
    for verdict in verdicts:
        tokens = policy.tokenizer(verdict, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            out = policy.model(torch.tensor([context + tokens])).logits[0].log_softmax(-1)
        logp.append(sum(out[len(context) - 1 + i, t] for i, t in enumerate(tokens)))
    yes, no = (math.exp(x) for x in logp)
    return yes / (yes + no)


def test_render_fills_prompt_response_answer_and_rubric():
    template = "Q {prompt} R {response} A {answer} [{rubric}] {{literal}}"
    assert render(template, EXAMPLES[1], "9") == "Q 4*2= R 9 A 8 [exact] {literal}"
    assert render(template, EXAMPLES[0], "x{y}") == "Q 12+3= R x{y} A 15 [] {literal}"  # no rubric column: empty


def test_template_fields_and_settings_are_validated():
    with pytest.raises(ConfigError, match=r"uses \['question'\]"):
        judge(template="{question} {response}")
    with pytest.raises(ConfigError, match="criteria names"):
        judge(criteria=[{"name": "a", "template": "{prompt}"}, {"name": "a", "template": "{response}"}])
    with pytest.raises(ConfigError, match="needs url"):
        judge(backend="http")
    with pytest.raises(ConfigError, match="needs path"):
        judge(backend="classifier")
    with pytest.raises(ConfigError, match="score_range"):
        judge(backend="http", url="http://x/v1", model="m", score_range=(1, 1))
    with pytest.raises(ConfigError, match="score_pattern"):
        judge(backend="http", url="http://x/v1", model="m", score_pattern="(")
    with pytest.raises(ConfigError, match="verdicts"):
        judge(verdicts=(" Yes", " Yes"))


def test_causal_score_is_the_verdict_probability_of_a_direct_forward(policy):
    role = judge(template="{prompt}{response} ok?", batch_size=2)  # 3 texts in 2 forwards
    got = role.build(policy)(EXAMPLES, COMPLETIONS)
    assert got.scores.shape == (3, 1) and not got.failures
    expected = [direct_score(policy, e.prompt + c + " ok?", (" Yes", " No")) for e, c in zip(EXAMPLES, COMPLETIONS)]
    torch.testing.assert_close(got.scores[:, 0], torch.tensor(expected, dtype=torch.float32), atol=SCORE_ATOL, rtol=0)
    single = judge(template="{prompt}", verdicts=("1", "5")).build(policy)(EXAMPLES[:1], ["-"])  # one-token verdicts
    assert single.scores[0, 0].item() == pytest.approx(direct_score(policy, "12+3=", ("1", "5")), abs=SCORE_ATOL)


def test_criteria_give_one_column_each_in_order(policy):
    templates = {"right": "{prompt}{response}", "short": "{response}!", "ref": "{answer}={response}"}
    multi = judge(criteria=[{"name": n, "template": t} for n, t in templates.items()]).build(policy)
    got = multi(EXAMPLES, COMPLETIONS)
    assert multi.names == ("right", "short", "ref") and got.scores.shape == (3, 3)
    for d, template in enumerate(templates.values()):
        alone = judge(template=template).build(policy)(EXAMPLES, COMPLETIONS).scores[:, 0]
        torch.testing.assert_close(got.scores[:, d], alone, atol=SCORE_ATOL, rtol=0)


def test_texts_beyond_the_context_fail_as_too_long(policy):
    role = judge(template="{prompt}{response}" + "." * 50)  # SMALL's context: 64 positions
    got = role.build(policy)([Example("1+1=", "2"), Example("1+1=" * 3, "2")], ["2", "2"])
    assert got.scores[0, 0].isfinite() and got.scores[1, 0].isnan()
    assert got.failures == {"too_long": 1} and "context of 64" in got.details["too_long"]


def test_a_non_finite_model_score_is_a_counted_failure(policy):
    broken = build_tiny_policy(SMALL)
    with torch.no_grad():
        broken.hf_model.model.norm.weight.fill_(math.nan)
    got = judge().build(broken)(EXAMPLES, COMPLETIONS)
    assert got.scores.isnan().all() and got.failures == {"non_finite": 3}


def test_the_causal_judge_is_a_frozen_copy_or_a_folder(policy, tmp_path):
    scorer = judge().scorer(policy)
    assert scorer.model is not policy and not any(p.requires_grad for p in scorer.model.parameters())
    assert not JudgeRole.checkpointed
    copy.deepcopy(policy).float().save(tmp_path / "lm")
    loaded = judge(path=str(tmp_path / "lm")).build(policy)(EXAMPLES, COMPLETIONS).scores
    copied = judge().build(policy)(EXAMPLES, COMPLETIONS).scores
    torch.testing.assert_close(loaded, copied, atol=1e-4, rtol=0)  # float32 folder vs float64 copy


def test_classifier_scores_the_rendered_prompt_and_the_completion(tmp_path):
    torch.manual_seed(0)
    rm = RewardModel.from_causal_lm(build_tiny_policy(SMALL).hf_model, build_char_tokenizer())  # 64 positions
    with torch.no_grad():  # a non-zero head, so scores differ per pair
        rm.model.score.weight.normal_()
    rm.save(tmp_path / "rm")
    role = judge(backend="classifier", path=str(tmp_path / "rm"), template="{prompt} [{answer}] ", batch_size=2)
    got = role.build(build_tiny_policy(SMALL))(EXAMPLES, COMPLETIONS)
    expected = rm.score([f"{e.prompt} [{e.answer}] " for e in EXAMPLES], COMPLETIONS)
    torch.testing.assert_close(got.scores[:, 0], expected, atol=1e-5, rtol=0)
    long = role.build(build_tiny_policy(SMALL))([Example("9" * 70, "1"), EXAMPLES[0]], ["1", "15"])
    assert long.scores[:, 0].isnan().tolist() == [True, False] and long.failures == {"too_long": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_fails_every_sample_after_its_retries():
    role = judge(backend="http", url=f"http://127.0.0.1:{free_port()}/v1", model="m", retries=2, backoff_s=0.01,
                 batch_size=2, concurrency=2)
    built = role.build(build_tiny_policy(SMALL))
    got = built(EXAMPLES, COMPLETIONS)  # no exception
    assert got.scores.isnan().all() and got.failures == {"connection": 3}
    assert "refused" in got.details["connection"].lower()
    assert built.scorer.client.requests == 2 * 3  # 2 requests (batches of 2 prompts), each tried 1 + 2 times


def test_a_run_waits_for_an_endpoint_that_never_answers_then_refuses_in_one_line():
    url = f"http://127.0.0.1:{free_port()}/v1"
    lines = []
    with pytest.raises(ConfigError, match=r"^roles.judge: no answer from .* after 3 tries in 2 s .*refused.*start an "
                                          r"OpenAI-compatible server of 'm' there[^\n]*$"):
        judge(backend="http", url=url, model="m", wait_s=1.5).preflight(lines.append)
    # tries after 1 s and 0.5 s (what is left of wait_s), one line per failed try but the last
    assert [line.split(" (try ")[1][:3] for line in lines] == ["1/3", "2/3"]
    assert all(line.startswith(f"judge: waiting for the judge at {url} (try ") for line in lines)


def test_any_http_reply_shows_the_endpoint_is_up():
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # 501 to every GET
    threading.Thread(target=server.handle_request, daemon=True).start()
    lines = []
    judge(backend="http", url=f"http://127.0.0.1:{server.server_port}/v1", model="m", wait_s=0).preflight(lines.append)
    server.server_close()
    assert lines == []
    judge(backend="causal").preflight(lines.append)  # a local judge waits for nothing
    assert lines == []


def test_the_api_key_comes_from_the_named_environment_variable(monkeypatch):
    role = judge(backend="http", url="http://127.0.0.1:1/v1", model="m", api_key_env="POLO_TEST_JUDGE_KEY")
    monkeypatch.delenv("POLO_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="POLO_TEST_JUDGE_KEY"):
        role.client()
    monkeypatch.setenv("POLO_TEST_JUDGE_KEY", "sk-test")
    assert role.client().api_key == "sk-test" and "sk-test" not in str(role.model_dump())


@pytest.mark.parametrize("text, pattern, expected", [
    ("Score: 7/10", r"(\d+)/10", 6 / 9),  # (7 − 1)/(10 − 1)
    ("I think YES.", r"(?i)\b(yes|no)\b", 1.0),
    ("partial credit", r"(?i)(correct|partial|incorrect)", 0.5),
    ("10", r"\d+", 1.0),  # no group: the whole match
])
def test_parse_score_reads_numbers_and_verdicts(text, pattern, expected):
    verdicts = {"YES": 1.0, "no": 0.0, "correct": 1.0, "partial": 0.5, "incorrect": 0.0}
    score, reason = parse_score(text, re.compile(pattern), verdicts, (1.0, 10.0))
    assert reason is None and score == pytest.approx(expected)


@pytest.mark.parametrize("text, pattern, reason", [
    ("no digits here", r"(\d+)", "unparseable"),
    ("maybe", r"(\w+)", "unparseable"),  # neither a verdict nor a number
    ("11", r"(\d+)", "out_of_range"),
    ("nan", r"(\w+)", "out_of_range"),
])
def test_parse_score_failures(text, pattern, reason):
    score, got = parse_score(text, re.compile(pattern), {"yes": 1.0}, (1.0, 10.0))
    assert math.isnan(score) and got == reason


def test_replies_without_text_for_a_prompt_are_malformed():
    client = EndpointClient("http://127.0.0.1:1/v1", "m")
    replies = client._parse({"choices": [{"index": 1, "text": "7"}, {"index": 0, "text": None}]}, 2)
    assert [r.text for r in replies] == [None, "7"] and replies[0].failure == "malformed"
    chat = EndpointClient("http://127.0.0.1:1/v1", "m", endpoint="chat")
    assert chat._parse({"choices": [{"message": {"content": "yes"}}]}, 1)[0].text == "yes"


def test_judge_marks_every_failed_judgment_nan():
    def scorer(texts, completions):
        return Scored(torch.tensor([0.2, 0.4, math.inf, 0.8]), [None, "timeout", None, None], {"timeout": "slow"})

    got = Judge([("a", "{prompt}"), ("b", "{response}")], scorer)(EXAMPLES[:2], COMPLETIONS[:2])
    assert got.scores.isnan().tolist() == [[False, True], [True, False]]
    assert got.failures == {"timeout": 1, "non_finite": 1} and got.details["timeout"] == "slow"


def test_the_rule_judge_scores_with_the_task_rewards_over_their_maxima():
    from functools import partial

    from polo.roles.base import RoleResources
    from polo.tasks import build_task
    from polo.tasks.rewards import rule_scores
    role = judge(backend="rule", criteria=[{"name": "ok", "rule": "correct"}, {"name": "digits", "rule": "digit_match"}])
    role.bind(RoleResources(rule_scores=partial(rule_scores, build_task({"name": "addition"}))))
    got = role.build(None)([Example("12+3=", "15"), Example("4*2=", "18"), Example("7-7=", "0")], ["15", "19", "5"])
    # correct: 1, 0, 0 (max 1); digit_match: 2/2, 1/2 ("19" vs "18": first digit), 0/1
    assert got.scores.tolist() == [[1.0, 1.0], [0.0, 0.5], [0.0, 0.0]]
    assert got.failures == {}


def test_the_rule_judge_needs_a_rule_per_criterion_and_the_run_task():
    with pytest.raises(ValueError, match="needs a rule"):
        judge(backend="rule", criteria=[{"name": "a", "rule": "correct"}, {"name": "b", "template": "{prompt}"}])
    with pytest.raises(ValueError, match="read by backend 'rule' only"):
        judge(backend="causal", rule="correct")
    with pytest.raises(ConfigError, match="rule_scores"):
        judge(backend="rule", rule="correct").build(None)
