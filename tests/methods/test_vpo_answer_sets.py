"""The answer_sets task: a base task's problems answered with several answers per completion (VPO)."""
import random

import pytest

from polo.core.registry import ConfigError
from polo.methods.vpo.task import near_miss
from polo.tasks import build_task
from polo.tasks.base import Example
from polo.tasks.rewards import RewardSpec, reward_maxima, score_batch

EXAMPLE = Example("40+45=", "85")


def answer_sets(**knobs):
    return build_task({"name": "answer_sets", "base": {"name": "addition"}, **knobs})


def test_demonstrations_are_the_answer_then_near_misses():
    task = answer_sets(answers=3, demo_noise=1.0)
    demos = [task.demonstration(e) for e in task.warm_start_examples(200, 0)]
    sums = [e.answer for e in task.warm_start_examples(200, 0)]
    for demo, answer in zip(demos, sums):
        first, *rest = demo.split("\n")
        assert first == answer and len(rest) == 2
        for miss in rest:  # cut short, or one digit changed (the answer itself only when it has one digit)
            changed = len(miss) == len(answer) and sum(a != b for a, b in zip(miss, answer)) == 1
            assert miss == answer[:-1] or changed or len(answer) == 1
    assert task.demonstration(EXAMPLE) == task.demonstration(EXAMPLE)  # seeded by the prompt
    assert answer_sets(answers=3, demo_noise=0.0).demonstration(EXAMPLE) == "85\n85\n85"
    assert answer_sets(answers=2, separator=" | ", template="{answers}x {prompt}").examples("train", 1, 0)[0] \
        .prompt.startswith("2x ")
    assert answer_sets(answers=3).max_completion_chars == 3 * 3 + 2


def test_near_miss():
    rng = random.Random(0)
    misses = {near_miss("85", rng) for _ in range(200)}
    assert "8" in misses and "85" not in misses and all(len(m) in (1, 2) for m in misses)
    assert {near_miss("x", rng) for _ in range(20)} <= {"x"} | set("abcdefghijklmnopqrstuvwyz")
    assert near_miss("+", rng) == "+"


def test_a_set_is_correct_and_scored_by_its_best_answer():
    task = answer_sets(answers=3)
    completions = ["84\n85", "84\n8", "", "1\n\n2\n3\n85"]  # empty pieces skipped; a 4th answer is not read
    assert task.verify(completions, [EXAMPLE] * 4) == [True, False, False, False]
    specs = [RewardSpec("correct", 1.0), RewardSpec("char_match", 1.0), RewardSpec("shortness", 1.0)]
    scores = score_batch(task, specs, [EXAMPLE] * 4, completions)
    assert scores.values.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.5, 0.75], [0.0, 0.0, 0.0], [0.0, 0.0, 0.75]]
    assert scores.present.all()  # no answer: 0 on every component (the authors' all-zero matrix), not None
    assert reward_maxima(task, specs).tolist() == [1.0, 1.0, 1.0]
    assert task.default_rewards == build_task("addition").default_rewards


def test_a_base_with_an_answer_marker_is_refused():
    with pytest.raises(ConfigError, match="base task 'addition_trace' gives its answer after the marker"):
        build_task({"name": "answer_sets", "base": {"name": "addition_trace"}})
