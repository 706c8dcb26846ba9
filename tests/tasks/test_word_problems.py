"""word_problems: hand-checked stories, traces that compute the answer, distractors that change nothing,
bounded values and lengths, strict integer answers, disjoint splits, knob errors."""
import itertools
import re

import pytest

from polo.core.registry import ConfigError
from polo.policy.tokenizer import unknown_characters
from polo.tasks import Example, build_task, score, split_of

KNOBS = list(itertools.product((2, 3, 4, 5), (0, 1, 2, 3), (10, 99, 999)))
LINE = re.compile(r"(\d+)([-+*/])(\d+)=(\d+)")
APPLY = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}


def task_of(ops=2, distractors=1, max_value=99):
    return build_task({"name": "word_problems", "ops": ops, "distractors": distractors, "max_value": max_value})


def solve(prompt: str) -> tuple[list[str], int, int]:
    """Reads the story as a person would: only the sentences about the person asked about, each rewritten as
    its computations. Returns the computation lines, the answer and the number of sentences skipped."""
    *sentences, question = re.split(r"(?<=[.?]) ", prompt.removesuffix("\n"))
    items, hero = re.fullmatch(r"How many (\w+) does (\w+) have\?", question).groups()
    lines, x, skipped = [], None, 0

    def compute(a, op, b):
        lines.append(f"{a}{op}{b}={APPLY[op](a, b)}")
        assert op != "/" or a % b == 0
        return APPLY[op](a, b)

    for sentence in sentences:
        if not sentence.startswith(hero + " "):
            skipped += 1
            continue
        body = sentence[len(hero) + 1:].removesuffix(".")
        if m := re.fullmatch(rf"has (\d+) boxes of (\d+) {items}", body):
            x = compute(int(m[1]), "*", int(m[2]))
        elif m := re.fullmatch(rf"has (\d+) {items}", body):
            x = int(m[1])
        elif m := re.fullmatch(r"(?:buys|picks|wins|finds|earns) (\d+) more", body):
            x = compute(x, "+", int(m[1]))
        elif m := re.fullmatch(r"(?:eats|loses|spends) (\d+)|(?:gives|pays) (\d+) to [A-Z][a-z]+", body):
            x = compute(x, "-", int(m[1] or m[2]))
        elif m := re.fullmatch(r"now has (\d+) times as many", body):
            x = compute(x, "*", int(m[1]))
        elif m := re.fullmatch(r"keeps 1/(\d+) of them", body):
            x = compute(x, "/", int(m[1]))
        elif m := re.fullmatch(r"(gets|gives away) (\d+) boxes of (\d+)", body):
            x = compute(x, "+" if m[1] == "gets" else "-", compute(int(m[2]), "*", int(m[3])))
        else:
            raise AssertionError(f"unreadable sentence {sentence!r}")
    return lines, x, skipped


@pytest.mark.parametrize("seed, expected", [
    (0, [("A lamp costs 20 dollars. Bob has 17 stamps. Bob gives 16 to Jon. Bob wins 10 more. How many stamps "
          "does Bob have?\n", "17-16=1\n1+10=11\n#### 11"),
         ("Kim has 12 coins. A lamp costs 14 dollars. Kim gives away 2 boxes of 3. How many coins does Kim "
          "have?\n", "2*3=6\n12-6=6\n#### 6")]),
    (1, [("Dev has 16 pens. Jon has 16 apples. Jon gets 2 boxes of 2. How many apples does Jon have?\n",
          "2*2=4\n16+4=20\n#### 20"),
         ("Sam has 9 coins. A pen costs 14 dollars. Sam now has 2 times as many. Sam finds 1 more. How many coins "
          "does Sam have?\n", "9*2=18\n18+1=19\n#### 19")]),
])
def test_hand_checked_problems(seed, expected):
    task = build_task("word_problems")
    examples = task.examples("train", 2, seed=seed)
    assert [(ex.prompt, task.demonstration(ex)) for ex in examples] == expected
    assert [ex.answer for ex in examples] == [demo.rsplit(" ", 1)[1] for _, demo in expected]


@pytest.mark.parametrize("ops, distractors, max_value", KNOBS)
def test_traces_compute_the_answer_that_the_story_without_distractors_implies(ops, distractors, max_value):
    task = task_of(ops, distractors, max_value)
    for ex in task.examples("train", 150, seed=ops + 7 * distractors):
        trace = task.trace(ex).split("\n")
        assert len(trace) == ops
        for text in trace:
            a, op, b, result = LINE.fullmatch(text).groups()
            assert APPLY[op](int(a), int(b)) == int(result)
            assert op != "/" or int(a) % int(b) == 0
            assert all(1 <= int(v) <= max_value for v in (a, b, result))
        assert trace[-1].endswith(f"={ex.answer}")
        lines, value, skipped = solve(ex.prompt)
        assert (lines, str(value), skipped) == (trace, ex.answer, distractors)
        assert task.is_correct(task.demonstration(ex), ex)


def test_every_operation_and_sentence_kind_occurs():
    task = task_of(ops=5, distractors=3)
    examples = task.examples("train", 400, seed=0)
    ops = {LINE.fullmatch(t)[2] for ex in examples for t in task.trace(ex).split("\n")}
    assert ops == {"+", "-", "*", "/"}
    text = " ".join(ex.prompt for ex in examples)
    for phrase in ("times as many", "keeps 1/", "gets", "gives away", "boxes of", "costs", "more", " to "):
        assert phrase in text


def test_completions_need_the_marker_and_a_plain_integer():
    task = build_task("word_problems")
    ex = Example("Ann has 5 eggs. Ann eats 2. How many eggs does Ann have?\n", "3", {"trace": "5-2=3"})
    assert task.demonstration(ex) == "5-2=3\n#### 3"
    for good in ["5-2=3\n#### 3", "#### 3", "5-2=4\n#### 3\n", "####3"]:
        assert task.is_correct(good, ex)
    for bad in ["3", "5-2=3", "#### 4", "#### 03", "#### +3", "#### 3.0", "#### 3 eggs", "####", "", "# 3"]:
        assert not task.is_correct(bad, ex)
    rewards, names, _ = score(task, ["correct", "format"], [ex] * 3, ["#### 3", "#### 4", "3"])
    assert names == ("correct", "format")
    assert rewards.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    zero = Example(ex.prompt, "0", {"trace": "x"})
    assert task.is_correct("#### 0", zero) and not task.is_correct("#### 00", zero)


@pytest.mark.parametrize("ops, max_value", [(2, 99), (5, 99), (3, 999), (4, 10)])
def test_max_completion_chars_bounds_every_demonstration(ops, max_value):
    task = task_of(ops, 1, max_value)
    longest = max(len(task.demonstration(ex)) for ex in task.examples("train", 2000, seed=0))
    assert longest <= task.max_completion_chars
    if max_value in (99, 999):  # every number may have the full width: the bound is (nearly) reached
        assert longest >= task.max_completion_chars - 3


def test_prompts_are_short_printable_ascii():
    lengths = {}
    for ops, distractors, max_value in KNOBS:
        examples = task_of(ops, distractors, max_value).examples("train", 300, seed=1)
        assert not unknown_characters(ex.prompt for ex in examples)
        lengths[ops, distractors, max_value] = max(len(ex.prompt) for ex in examples)
    assert lengths[5, 1, 99] <= 210  # the largest rung of the ladder (docs/tasks.md)
    assert max(lengths.values()) <= 280


@pytest.mark.parametrize("ops, distractors, max_value", [(2, 0, 10), (5, 3, 999)])
def test_splits_are_disjoint_and_deterministic(ops, distractors, max_value):
    task = task_of(ops, distractors, max_value)
    train = [ex.prompt for ex in task.examples("train", 500, seed=0)]
    test = [ex.prompt for ex in task.examples("test", 100, seed=0)]
    assert len(set(train)) > 450 and len(set(test)) > 90  # a space far larger than a warm start's draws
    assert not set(train) & set(test)
    assert all(split_of(p, task.test_fraction) == "test" for p in test)
    assert task.examples("test", 100, seed=0) == task.examples("test", 100, seed=0)


@pytest.mark.parametrize("knob, value", [("ops", 1), ("ops", 6), ("distractors", -1), ("distractors", 4),
                                         ("max_value", 9), ("max_value", 1000), ("ops", "two")])
def test_knob_errors_name_the_knob(knob, value):
    with pytest.raises(ConfigError, match=f"task.{knob}"):
        build_task({"name": "word_problems", knob: value})
