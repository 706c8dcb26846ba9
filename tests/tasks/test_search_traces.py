"""countdown_trace (a written depth-first search) and sort_trace (selection sort written out)."""
import re
from collections import Counter

import pytest

from polo.core.registry import ConfigError
from polo.policy.tokenizer import unknown_characters
from polo.tasks import build_task
from polo.tasks.base import Example
from polo.tasks.countdown import value_of
from polo.tasks.countdown_trace import Step, expression, prompt_rng, search
from polo.tasks.sort_trace import selection_lines

STEP = re.compile(r"(\d+)([-+*/])(\d+)=(\d+) \[(\d+(?:,\d+)*)\]( x)?")


def countdown_example(numbers, target):
    return Example(" ".join(map(str, numbers)) + f">{target}:", "", {"numbers": numbers, "target": target})


@pytest.mark.parametrize("numbers, target, dead_ends, demonstration", [
    ((2, 3, 5), 17, 2, "2*3=6 [5,6]\n 5+6=11 [11] x\n 6-5=1 [1] x\n3*5=15 [2,15]\n 2+15=17 [17]\n#### 2+3*5"),
    ((6, 8, 9), 5, 2, "6+9=15 [8,15]\n 8*15=120 [120] x\n 15-8=7 [7] x\n6+8=14 [9,14]\n 14-9=5 [5]\n#### 6+8-9"),
    ((2, 5, 9), 90, 0, "2*5=10 [9,10]\n 9*10=90 [90]\n#### 9*2*5"),
    ((3, 4, 4, 5), 48, 1,
     "4+5=9 [3,4,9]\n 4*9=36 [3,36]\n  3*36=108 [108] x\n 3+9=12 [4,12]\n  4*12=48 [48]\n#### 4*(3+4+5)"),
    ((1, 2, 5, 8), 6, 1, "1+2=3 [3,5,8]\n 5-3=2 [2,8]\n  2*8=16 [16] x\n  8-2=6 [6]\n#### 8-(5-(1+2))"),
])
def test_countdown_trace_hand_checked(numbers, target, dead_ends, demonstration):
    task = build_task({"name": "countdown_trace", "count": len(numbers), "dead_ends": dead_ends})
    example = countdown_example(numbers, target)
    _, path = task.solve(example.prompt, numbers, target)
    example = Example(example.prompt, expression(numbers, path), example.columns)
    assert task.demonstration(example) == demonstration
    assert task.is_correct(demonstration, example)


def test_expression_parenthesizes_only_where_needed():
    def step(x, op, y, r):
        return Step(0, x, op, y, r, (), False)

    assert expression((2, 5, 9), [step(5, "-", 2, 3), step(9, "-", 3, 6)]) == "9-(5-2)"
    assert expression((2, 4, 8), [step(4, "/", 2, 2), step(8, "/", 2, 4)]) == "8/(4/2)"
    assert expression((2, 4, 8), [step(8, "/", 4, 2), step(2, "*", 2, 4)]) == "2*8/4"
    assert expression((3, 5, 7), [step(3, "+", 5, 8), step(7, "*", 8, 56)]) == "7*(3+5)"


def check_search(demonstration, numbers, target, dead_ends):
    """Every step combines two numbers of its parent's list with the right arithmetic and writes the list that
    results; ``x`` marks exactly the steps the search goes no further from; the last step reaches the target."""
    trace, answer = demonstration.split("\n#### ")
    lines, parents, dead = trace.split("\n"), [tuple(numbers)], 0
    depths = [len(line) - len(line.lstrip(" ")) for line in lines]
    for i, (line, depth) in enumerate(zip(lines, depths)):
        assert depth < len(parents), line
        del parents[depth + 1:]
        match = STEP.fullmatch(line[depth:])
        assert match, line
        x, op, y, r = int(match[1]), match[2], int(match[3]), int(match[4])
        assert r == {"+": x + y, "-": x - y, "*": x * y, "/": x // y}[op] > 0, line
        assert op != "/" or x % y == 0, line
        rest = Counter(parents[depth]) - Counter([x, y])
        assert sum(rest.values()) == len(parents[depth]) - 2, f"{line}: {x}, {y} not in {parents[depth]}"
        after = tuple(sorted([*rest.elements(), r]))
        assert match[5] == ",".join(map(str, after)), line
        parents.append(after)
        last = i == len(lines) - 1
        assert (r == target) == last, line
        assert bool(match[6]) == (not last and depths[i + 1] <= depth), line
        dead += bool(match[6])
    assert dead <= dead_ends
    assert value_of(answer, numbers) == target


KNOBS = [(count, dead_ends, 9) for count in (2, 3, 4, 5) for dead_ends in (0, 1, 3)] + [
    (count, 2, 25) for count in (2, 3, 4)]


@pytest.mark.parametrize("count, dead_ends, max_value", KNOBS)
def test_countdown_trace_demonstrations_are_consistent_correct_and_bounded(count, dead_ends, max_value):
    task = build_task({"name": "countdown_trace", "count": count, "dead_ends": dead_ends, "max_value": max_value})
    examples = task.examples("train", 120, seed=count + dead_ends) + task.examples("test", 10, seed=1)
    for example in examples:
        demonstration = task.demonstration(example)
        check_search(demonstration, example.columns["numbers"], example.columns["target"], dead_ends)
        assert task.is_correct(demonstration, example)
        assert len(demonstration) <= task.max_completion_chars
        assert not unknown_characters([example.prompt, demonstration])  # the built-in tokenizer covers it


def test_countdown_trace_count_six_solves():
    task = build_task({"name": "countdown_trace", "count": 6, "dead_ends": 2})
    for example in task.examples("train", 15, seed=0):
        demonstration = task.demonstration(example)
        check_search(demonstration, example.columns["numbers"], example.columns["target"], 2)
        assert len(demonstration) <= task.max_completion_chars


@pytest.mark.parametrize("dead_ends", [0, 1, 2, 5])
def test_countdown_trace_writes_the_tail_of_the_real_search(dead_ends):
    task = build_task({"name": "countdown_trace", "count": 4, "dead_ends": dead_ends})
    for example in task.examples("train", 40, seed=3):
        numbers = example.columns["numbers"]
        full = [s.line() for s in search(numbers, example.columns["target"], prompt_rng(example.prompt))]
        shown = task.trace(example).split("\n")
        kept = next(len(shown) - a for a in range(len(shown)) if shown[a:] == full[len(full) - len(shown) + a:])
        assert kept >= len(shown) - 2  # at most count - 2 ancestors precede the search's tail
        assert set(shown[: len(shown) - kept]) <= set(full)
        assert sum(line.endswith(" x") for line in shown) == min(dead_ends, sum(s.endswith(" x") for s in full))


def test_countdown_trace_search_is_deterministic_given_the_prompt():
    task = build_task({"name": "countdown_trace", "count": 4})
    a, b = task.examples("train", 30, seed=5), task.examples("train", 30, seed=5)
    assert [task.demonstration(e) for e in a] == [task.demonstration(e) for e in b]
    assert all(e.columns["target"] not in e.columns["numbers"] for e in a)


def test_countdown_trace_wrong_or_markerless_completions_are_wrong():
    task = build_task({"name": "countdown_trace"})
    example = countdown_example((2, 3, 5), 17)
    assert task.is_correct("anything\n#### 3*5+2", example)
    for completion in ["2+3*5", "#### (2+3)*5", "#### 17", "#### 2+3*5*2", "#### 2+3*5+0", "####", "#### x",
                       "2*3=6 [5,6]\n"]:
        assert not task.is_correct(completion, example), completion
    rewards = task.task_rewards()
    columns = {"numbers": [(2, 3, 5)] * 3, "target": [17] * 3}
    completions = ["#### 2+3*5", "2+3*5", "#### 2*3*5"]
    assert rewards["correct"]([example.prompt] * 3, completions, ["2+3*5"] * 3, **columns) == [1.0, 0.0, 0.0]
    assert rewards["format"]([example.prompt] * 3, completions) == [1.0, 0.0, 1.0]


@pytest.mark.parametrize("name, knobs", [("countdown_trace", {"count": 3}), ("sort_trace", {"length": 6})])
def test_search_trace_splits_are_disjoint(name, knobs):
    task = build_task({"name": name, **knobs})
    train = {e.prompt for e in task.examples("train", 300, seed=0)}
    test = {e.prompt for e in task.examples("test", 60, seed=0)}
    assert train and test and not train & test


@pytest.mark.parametrize("config, key", [
    ({"name": "countdown_trace", "count": 1}, "count"),
    ({"name": "countdown_trace", "count": 7}, "count"),
    ({"name": "countdown_trace", "dead_ends": -1}, "dead_ends"),
    ({"name": "countdown_trace", "max_value": 0}, "max_value"),
    ({"name": "countdown_trace", "depth": 2}, "depth"),
    ({"name": "sort_trace", "length": 0}, "length"),
    ({"name": "sort_trace", "length": "long"}, "length"),
])
def test_search_trace_knob_validation(config, key):
    with pytest.raises(ConfigError, match=key):
        build_task(config)


@pytest.mark.parametrize("word, demonstration", [
    ("dbca", "a dbc\nb dc\nc d\nd\n#### abcd"),
    ("abab", "a bab\na bb\nb b\nb\n#### aabb"),
    ("q", "q\n#### q"),
])
def test_sort_trace_hand_checked(word, demonstration):
    task = build_task({"name": "sort_trace", "length": len(word)})
    example = Example(word + "=", "".join(sorted(word)))
    assert task.demonstration(example) == demonstration
    assert len(demonstration) == task.max_completion_chars


@pytest.mark.parametrize("length", [1, 2, 5, 8, 12, 16, 20, 40])
def test_sort_trace_demonstrations_are_consistent_correct_and_bounded(length):
    task = build_task({"name": "sort_trace", "length": length})
    for example in task.examples("train", 250, seed=length):
        demonstration = task.demonstration(example)
        assert len(demonstration) == task.max_completion_chars  # the bound is exact
        assert not unknown_characters([example.prompt, demonstration])
        assert task.is_correct(demonstration, example)
        left, picked = example.prompt[:-1], []
        for line in demonstration.split("\n#### ")[0].split("\n"):
            letter, rest = line[0], line[2:]
            assert letter == min(left) and line[1:2] in ("", " ")
            at = left.index(letter)
            left = left[:at] + left[at + 1:]
            assert rest == left
            picked.append(letter)
        assert left == "" and "".join(picked) == example.answer


def test_sort_trace_wrong_or_markerless_completions_are_wrong():
    task = build_task({"name": "sort_trace", "length": 4})
    example = Example("dbca=", "abcd")
    assert task.is_correct("garbage\n####  abcd ", example)
    for completion in ["abcd", "#### abdc", "#### abc", "####", "a dbc\nb dc\nc d\nd"]:
        assert not task.is_correct(completion, example), completion
    assert selection_lines("ba") == ["a b", "b"]
