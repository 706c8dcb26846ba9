"""PRS rewards (format stage, LA-BLEU quality) and the tool_calc task they score."""
import math
import re

import pytest

from polo.policy.tokenizer import unknown_characters
from polo.tasks import build_task, score
from polo.tasks.la_bleu import la_bleu
from polo.tasks.prs import prs, prs_format, tool_format
from polo.tasks.tool_calls import format_score, tagged_answer

REF = "the eiffel tower"


def test_la_bleu_worked_example():
    assert la_bleu("eiffel tower", REF) == pytest.approx(0.6065, abs=1e-4)  # n_max 2, BP e^(1-3/2)
    assert la_bleu("the eiffel tower in paris", REF) == pytest.approx(0.4642, abs=1e-4)  # (3/5·2/4·1/3)^(1/3)
    assert la_bleu("paris", REF) == 0.0


def test_la_bleu_edges():
    assert la_bleu("The  Eiffel\ttower", REF) == 1.0  # lower-cased, whitespace-split
    assert la_bleu("", REF) == 0.0 and la_bleu("tower", "") == 0.0
    assert la_bleu("tower tower", "tower") == 0.5  # clipped: one "tower" in the reference
    assert la_bleu("19", "19 pears") == pytest.approx(math.exp(-1))


def test_format_score():
    good = "<c>3*4</c>=12\n<c>7+12</c>=19\n<a>19 pears</a>"
    assert format_score(good) == 1.0 and tagged_answer(good) == "19 pears"
    assert format_score("<c>3*4=12\n<c>7+12</c>=19\n<a>19 pears</a>") == 0.5  # first call never closed
    assert format_score("<c>3x4</c>=12\n<c>7+12</c>=19\n<a>19</a>") == 0.5  # argument does not parse
    assert format_score("<c>3*4</c>=12\n#### 19 pears") == 0.0  # no answer tag
    assert format_score("<c>3*4</c><a> </a>") == 0.0  # empty answer
    assert format_score("<a>19 pears</a>") == 0.0  # no call, one required
    assert format_score("<a>19 pears</a>", min_calls=0) == 1.0
    assert format_score("<c>8/3</c><a>2</a>") == 0.0  # inexact division is not a calculator value
    with pytest.raises(ValueError, match="min_calls"):
        format_score("", min_calls=-1)


def test_prs_reward_worked_values():
    """f = 0, f = 0.5, f = 1 with q = 0, f = 1 with q = LA-BLEU 0.6065: -1, -0.5, 0, 0.6065."""
    completions = ["#### the eiffel tower", "<c>1+1=2 <c>2*2</c>=4 <a>eiffel tower</a>",
                   "<c>1+1</c>=2 <a>paris</a>", "<c>1+1</c>=2 <a>eiffel tower</a>"]
    values = prs(["q"] * 4, completions, [REF] * 4)
    assert values == pytest.approx([-1.0, -0.5, 0.0, 0.6065], abs=1e-4)
    assert prs_format(["q"] * 4, completions) == [-1.0, -0.5, 0.0, 0.0]
    assert tool_format(["q"] * 4, completions) == [0.0, 0.5, 1.0, 1.0]
    chat = [[{"role": "assistant", "content": c}] for c in completions]  # conversational completions read the same
    assert prs(["q"] * 4, chat, [REF] * 4) == values


def test_tool_calc_task():
    task = build_task({"name": "tool_calc"})
    train, test = task.examples("train", 300, seed=1), task.examples("test", 50, seed=1)
    assert not {e.prompt for e in train} & {e.prompt for e in test}
    demos = [task.demonstration(e) for e in train]
    assert not unknown_characters([e.prompt for e in train] + demos)
    assert max(map(len, demos)) <= task.max_completion_chars
    example = train[0]
    clean = f"{example.columns['calls']}\n<a>{example.answer}</a>"
    spaced = f"{example.columns['calls']}\n<a> {example.answer.upper().replace(' ', '  ')} </a>"
    assert task.is_correct(clean, example) and task.is_correct(spaced, example)
    assert not task.is_correct(f"{example.columns['calls']}\n<a>{example.answer.split()[0]}</a>", example)
    rewards, names, _ = score(task, task.default_rewards, train, demos)
    assert names == ("prs",)
    values = rewards[:, 0].tolist()
    noisy = sum(v < 1 for v in values) / len(values)
    assert 0.1 < noisy < 0.3  # demo_noise 0.2
    assert {round(v, 4) for v in values} <= {1.0, -1.0, -0.5, round(math.exp(-1), 4)}
    assert all((v == 1.0) == task.is_correct(d, e) for v, d, e in zip(values, demos, train))
    exact = build_task({"name": "tool_calc", "demo_noise": 0.0})
    assert all(exact.is_correct(exact.demonstration(e), e) for e in train)


def test_demonstrations_write_what_the_calculator_returns():
    """The warm start and the executed mode agree: wherever executed decoding pauses (each closing tag), the
    demonstration goes on with the calculator's reply to the text before it (noisy demonstrations included)."""
    task = build_task({"name": "tool_calc", "ops": 3, "max_value": 50, "distractors": 1})
    tool = task.tool()
    for example in task.examples("train", 200, seed=2):
        demo = task.demonstration(example)
        ends = [m.end() for m in re.finditer(re.escape(tool.trigger), demo)]
        assert ends
        for end in ends:
            reply = tool.respond(demo[:end])
            assert demo[end:].startswith(reply + "\n") and reply != "=error"


def test_tool_calc_bad_knobs():
    with pytest.raises(ValueError, match="demo_noise"):
        build_task({"name": "tool_calc", "demo_noise": 1.5})
    with pytest.raises(ValueError, match="ops"):
        build_task({"name": "tool_calc", "ops": 0})
