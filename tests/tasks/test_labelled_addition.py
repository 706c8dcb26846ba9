"""The built-in labelled task ``labelled_addition`` (vulpo's default): addition with a parity ``label`` and the
rewards a rule judge reads as VULPO's verdict, on hand-worked completions."""
import pytest

from polo.core.registry import ConfigError
from polo.inputs.example_inputs import label_missing
from polo.tasks import Example, build_task, score, task_names
from polo.tasks.rewards import RewardSpec

NAMES = ["correct", "verdict", "digit_match", "format"]
VUL = Example("62+51=", "113", {"label": "vul"})
SAFE = Example("49+97=", "146", {"label": "safe"})


def test_it_is_addition_with_its_knob():
    assert "labelled_addition" in task_names()
    task, plain = build_task({"name": "labelled_addition", "digits": 3}), build_task({"name": "addition", "digits": 3})
    examples = task.examples("train", 50, seed=0)
    assert [(e.prompt, e.answer) for e in examples] == [(e.prompt, e.answer) for e in plain.examples("train", 50, 0)]
    assert task.max_completion_chars == plain.max_completion_chars
    with pytest.raises(ConfigError, match="task.digits"):
        build_task({"name": "labelled_addition", "digits": 0})


def test_the_label_is_the_parity_of_the_sum():
    examples = build_task("labelled_addition").examples("train", 400, seed=0)
    assert all(e.columns == {"label": "vul" if int(e.answer) % 2 else "safe"} for e in examples)
    assert 160 <= sum(e.columns["label"] == "vul" for e in examples) <= 240  # about half (seed 0)


@pytest.mark.parametrize("example, completion, expected", [
    (VUL, "113", [1, 1, 1, 1]),
    (VUL, "117", [0, 1, 2 / 3, 1]),     # the right verdict (odd), two of three digits
    (VUL, "114", [0, 0, 2 / 3, 1]),     # the wrong verdict (even)
    (VUL, "11x", [0, 0, 2 / 3, 0]),     # no number: no verdict, no format
    (SAFE, "146", [1, 1, 1, 1]),
    (SAFE, "46", [0, 1, 2 / 3, 1]),     # even, units and tens right, the hundreds missing
    (SAFE, "145", [0, 0, 2 / 3, 1]),
])
def test_rewards_score_the_verdict_and_the_format(example, completion, expected):
    values = score(build_task("labelled_addition"), [RewardSpec(n, 1.0) for n in NAMES], [example], [completion])[0]
    assert values[0].tolist() == pytest.approx(expected)


def test_vulpo_reads_its_labels_and_refuses_a_task_without_them():
    assert label_missing(build_task("labelled_addition")) is None
    message = label_missing(build_task("addition"))
    assert "column 'label'" in message and "labelled_addition" in message
