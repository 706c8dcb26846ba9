"""The ``code`` task: deterministic problems whose shown examples single out the function, disjoint splits, hidden
tests run in the sandbox with per-test partial credit, and a short GRPO run on it."""
import math

import pytest

from polo.cli import main
from polo.core.registry import ConfigError
from polo.policy.tokenizer import unknown_characters
from polo.tasks import Example, build_task, score, split_of
from polo.tasks import sandbox
from polo.tasks.code import function_space, program
from polo.train.metrics import read_metrics

KNOWN = Example("f(0)=2 f(2)=8 f(3)=11 | def f(x): return ", "3*x+2",
                {"inputs": ((1,), (4,), (5,), (9,)), "outputs": (5, 14, 17, 29)})
# completion -> tests passed on KNOWN (inputs 1, 4, 5, 9)
GRADED = {
    "3*x+2": 4, " x*3+2 ": 4,  # the answer, and an equivalent program
    "min(x,5)*3+2": 3,  # right below 6
    "3*x+1": 0, "17": 1, "x+4": 1,  # a constant and another line that cross the true one once
    "": 0, "x+": 0, "import os": 0, "1\nimport os": 0, "1/0": 0, "x.y": 0,  # no expression, or raises
}


@pytest.fixture
def task():
    return build_task("code")


def test_problems_are_deterministic_and_splits_disjoint(task):
    assert task.examples("train", 20, seed=3) == task.examples("train", 20, seed=3)
    assert task.examples("train", 20, seed=3) != task.examples("train", 20, seed=4)
    train = {e.prompt for e in task.examples("train", 400, seed=0)}
    test = {e.prompt for e in task.examples("test", 60, seed=0)}
    assert train and test and not train & test and all(split_of(p, task.test_fraction) == "test" for p in test)


def test_examples_single_out_their_function_and_hide_other_inputs(task):
    space = function_space(task.families, task.max_coef, task.max_const)
    domain = range(task.max_input + 1)
    for example in task.examples("train", 100, seed=1):
        shown = [tuple(map(int, part[2:].split(")="))) for part in example.prompt.split(" | ")[0].split()]
        hidden = [args[0] for args in example.columns["inputs"]]
        assert len(shown) == task.shown and len(hidden) == task.tests and len(example.columns["outputs"]) == task.tests
        assert not {x for x, _ in shown} & set(hidden) and example.prompt.endswith(" | def f(x): return ")
        agreeing = {tuple(fn(x) for x in domain) for _, _, fn in space if all(fn(x) == y for x, y in shown)}
        assert len(agreeing) == 1  # every function that fits the examples is the same function on 0..max_input
        truth = next(fn for _, text, fn in space if text == example.answer)
        assert [truth(x) for x in hidden] == list(example.columns["outputs"])


def test_demonstrations_pass_every_hidden_test_and_fit_the_tokenizer(task):
    examples = task.examples("train", 30, seed=2) + task.examples("test", 10, seed=2)
    demos = [task.demonstration(e) for e in examples]
    assert task.verify(demos, examples) == [True] * 40 and all(task.is_correct(d, e) for d, e in zip(demos, examples))
    assert max(map(len, demos)) <= task.max_completion_chars
    assert not unknown_characters([e.prompt + e.answer for e in examples])
    values, names, weights = score(task, task.default_rewards, examples, demos)
    assert names == ("correct", "tests_passed") and weights.tolist() == [1.0, 0.5] and bool((values == 1).all())


def test_rewards_give_per_test_partial_credit(task):
    completions = list(GRADED)
    values, _, _ = score(task, task.default_rewards, [KNOWN] * len(completions), completions)
    passed = [GRADED[c] for c in completions]
    assert values[:, 0].tolist() == [float(n == 4) for n in passed]
    assert values[:, 1].tolist() == pytest.approx([n / 4 for n in passed], abs=1e-7)
    assert task.test_results(completions, [KNOWN] * len(completions))[2] == [True, True, True, False]
    assert [task.is_correct(c, KNOWN) for c in completions] == [n == 4 for n in passed]


def test_only_single_expressions_become_programs(recwarn):
    assert program(" 3*x+2\n") == "def f(x):\n    return 3*x+2\n"
    assert program("(x +\n 1)") == "def f(x):\n    return (x +\n 1)\n"
    for bad in ["", "   ", "x = 1", "1\nimport os", "return 1", "x)\n(x", "(" * 500 + "x" + ")" * 500, "x" * 1001]:
        assert program(bad) is None, bad
    assert program("3x") is None and program("1if x else 2") is not None
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]  # garbage is no code of ours: silent


def test_each_distinct_program_runs_once_per_batch(task, monkeypatch):
    sandbox.isolation_mode()  # the one-time probe is not a run of ours
    monkeypatch.setattr(sandbox, "RESULTS", sandbox.ResultCache())
    runs = []
    real = sandbox.run_program
    monkeypatch.setattr(sandbox, "run_program", lambda source, *a, **k: runs.append(source) or real(source, *a, **k))
    completions = ["3*x+2", "3*x+2", "x+4", "nonsense(", "x+4", "3*x+2"]
    score(task, task.default_rewards, [KNOWN] * 6, completions)
    assert sorted(runs) == sorted([program("3*x+2"), program("x+4")])
    task.verify(completions, [KNOWN] * 6)
    assert len(runs) == 2


def test_knobs_shape_the_problems_and_are_validated():
    task = build_task({"name": "code", "families": ["min", "max"], "max_const": 4, "tests": 3})
    examples = task.examples("train", 30, seed=0)
    assert all(e.answer[:4] in ("min(", "max(") for e in examples) and task.max_completion_chars == len("min(x,4)")
    assert all(len(e.columns["inputs"]) == 3 for e in examples)
    with pytest.raises(ConfigError, match="do not fit"):
        build_task({"name": "code", "shown": 5, "tests": 6, "max_input": 9})
    with pytest.raises(ConfigError, match="distinct"):
        build_task({"name": "code", "families": ["min", "min"]})
    with pytest.raises(ConfigError, match="families"):
        build_task({"name": "code", "families": ["cube"]})
    with pytest.raises(ConfigError, match="timeout_s"):
        build_task({"name": "code", "sandbox": {"timeout_s": -1}})


def test_grpo_trains_two_steps_on_code(tiny, tmp_path):
    run = tmp_path / "run"
    argv = ["train", "grpo", *tiny, "task.name=code", "train.steps=2", "train.eval_every=2", "train.save_every=2",
            "--run-dir", str(run)]
    assert main(argv) == 0
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        for key in ("reward/correct", "reward/tests_passed", "train/accuracy", "reward/total"):
            assert math.isfinite(row[key]), (key, row)
        assert 0 <= row["reward/correct"] <= row["reward/tests_passed"] <= 1
    assert math.isfinite(rows[-1]["eval/greedy_accuracy"])
