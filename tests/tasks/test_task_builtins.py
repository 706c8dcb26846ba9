"""Built-in generated tasks: determinism, disjoint splits, verified demonstrations, config errors."""
import random

import pytest

from polo.core.registry import ConfigError
from polo.tasks import Example, Task, build_task, score, split_of, task_names

CONFIGS = [
    {"name": "addition"},
    {"name": "addition", "digits": 4},
    {"name": "countdown"},
    {"name": "countdown", "count": 4, "max_value": 25},
    {"name": "reverse"},
    {"name": "sort", "length": 7},
]
IDS = [str(sorted(c.items())) for c in CONFIGS]


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_examples_are_deterministic_per_seed(config):
    task = build_task(config)
    assert task.name == config["name"]
    assert task.examples("train", 20, seed=3) == task.examples("train", 20, seed=3)
    assert task.examples("train", 20, seed=3) != task.examples("train", 20, seed=4)
    assert len(task.examples("test", 7, seed=0)) == 7


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_train_and_test_splits_are_disjoint(config):
    task = build_task(config)
    train = {ex.prompt for ex in task.examples("train", 300, seed=0)}
    test = {ex.prompt for ex in task.examples("test", 60, seed=0)}
    assert train and test and not train & test
    assert all(split_of(p, task.test_fraction) == "test" for p in test)


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_demonstrations_are_correct_and_earn_full_default_rewards(config):
    task = build_task(config)
    examples = task.examples("train", 40, seed=1) + task.examples("test", 10, seed=1)
    demos = [task.demonstration(ex) for ex in examples]
    assert all(task.is_correct(d, ex) for d, ex in zip(demos, examples))
    assert max(map(len, demos)) <= task.max_completion_chars
    rewards, names, weights = score(task, task.default_rewards, examples, demos)
    assert names[0] == "correct" and len(names) == len(weights) == rewards.shape[1]
    assert rewards.shape == (50, len(names)) and bool((rewards == 1.0).all())


@pytest.mark.parametrize("config", CONFIGS, ids=IDS)
def test_wrong_and_malformed_completions_are_not_correct(config):
    task = build_task(config)
    examples = task.examples("train", 10, seed=2)
    for bad in ["", "zz", "__import__('os')", "1" * 40]:
        rewards, _, _ = score(task, ["correct"], examples, [bad] * len(examples))
        assert not any(task.is_correct(bad, ex) for ex in examples)
        assert bool((rewards == 0.0).all())


def test_addition_problems():
    task = build_task({"name": "addition", "digits": 3})
    for ex in task.examples("train", 50, seed=0):
        a, b = map(int, ex.prompt.removesuffix("=").split("+"))
        assert ex.prompt == f"{a}+{b}=" and ex.answer == str(a + b) and a < 1000 and b < 1000
    ex = Example("37+48=", "85")
    assert task.is_correct(" 85\n", ex)
    assert not task.is_correct("86", ex) and not task.is_correct("8 5", ex) and not task.is_correct("085", ex)
    assert task.max_completion_chars == 4


def test_addition_partial_credit(f32):
    task = build_task("addition")
    completions = ["85", "75", "185", "8", "", "58", "x5"]
    rewards, names, weights = score(task, task.default_rewards, [Example("37+48=", "85")] * 7, completions)
    assert names == ("correct", "digit_match") and weights.tolist() == [1.0, 0.5]
    assert rewards[:, 0].tolist() == [1, 0, 0, 0, 0, 0, 0]
    # float64 rewards stored as float32: one rounding, at most ½ ulp, within rel = eps32
    assert rewards[:, 1].tolist() == pytest.approx([1, 0.5, 2 / 3, 0, 0, 0, 0.5], rel=f32.EPS, abs=0)


def test_string_tasks(f32):
    reverse, sort = build_task({"name": "reverse", "length": 4}), build_task({"name": "sort", "length": 4})
    ex = reverse.examples("train", 1, seed=0)[0]
    assert ex.prompt.endswith(">") and ex.answer == ex.prompt[:-1][::-1] and len(ex.answer) == 4
    ex = sort.examples("train", 1, seed=0)[0]
    assert ex.prompt.endswith("=") and ex.answer == "".join(sorted(ex.prompt[:-1]))
    examples = [Example("abc>", "cba")] * 3
    rewards, names, _ = score(reverse, reverse.default_rewards, examples, ["cba", "cbx", "c"])
    assert names == ("correct", "char_match")
    assert rewards.flatten().tolist() == pytest.approx([1, 1, 0, 2 / 3, 0, 1 / 3], rel=f32.EPS, abs=0)  # ½ ulp


def test_a_too_small_split_raises_instead_of_looping():
    class Constant(Task):
        max_completion_chars: int = 1

        def sample(self, rng: random.Random) -> Example:
            return Example("x", "y")

    task = Constant()
    empty = "train" if split_of("x", task.test_fraction) == "test" else "test"
    with pytest.raises(ValueError, match="too small"):
        task.examples(empty, 1, seed=0)
    with pytest.raises(ValueError, match="'valid'"):
        task.examples("valid", 1, seed=0)


def test_build_errors_name_the_bad_value():
    assert {"addition", "countdown", "reverse", "sort", "jsonl"} <= set(task_names())
    with pytest.raises(ConfigError, match="'additon'.*addition, .*countdown"):
        build_task({"name": "additon"})
    with pytest.raises(ConfigError, match="task.digits.*'two'"):
        build_task({"name": "addition", "digits": "two"})
    with pytest.raises(ConfigError, match="task.digitz"):
        build_task({"name": "addition", "digitz": 2})
    with pytest.raises(ConfigError, match="task.count"):
        build_task({"name": "countdown", "count": 1})
    with pytest.raises(ConfigError, match="task.test_fraction"):
        build_task({"name": "reverse", "test_fraction": 1.5})
