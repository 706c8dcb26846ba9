"""The preference_pairs task: pair rows from JSONL and from datasets, the base-task verifier (its test split and
warm start), named verifiers, the preferred reward and clear errors."""
import json
from pathlib import Path

import pytest

from polo.core.registry import ConfigError
from polo.tasks import build_task
from polo.tasks.base import split_of
from polo.tasks.preferences import EXAMPLE_PAIRS
from polo.tasks.rewards import RewardSpec, score

PAIRS = Path(__file__).parent / "data" / "addition_pairs.jsonl"


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_base_task_verifies_holds_out_its_test_split_and_gives_the_warm_start():
    task = build_task({"name": "preference_pairs", "path": str(PAIRS), "verifier": "addition"})
    addition = build_task("addition")
    train = task.examples("train", 10, seed=0)
    assert all({"chosen", "rejected"} <= set(e.columns) for e in train)
    assert all(task.is_correct(e.columns["chosen"], e) and not task.is_correct(e.columns["rejected"], e)
               for e in train)  # the file was built from addition's verifier
    assert task.examples("test", 5, seed=3) == addition.examples("test", 5, seed=3)
    assert task.warm_start_examples(7, seed=1) == addition.warm_start_examples(7, seed=1)
    assert task.demonstration(train[0]) == train[0].columns["chosen"]
    assert task.demonstration(addition.examples("train", 1, 0)[0]) == addition.examples("train", 1, 0)[0].answer
    assert task.max_completion_chars == addition.max_completion_chars
    assert [s.name for s in task.default_rewards] == ["correct", "digit_match"]


def test_rows_in_the_base_tasks_test_split_are_not_trained(tmp_path):
    held_out = build_task("addition").examples("test", 1, seed=0)[0]
    assert split_of(held_out.prompt, 0.1) == "test"
    rows = [{"prompt": held_out.prompt, "chosen": held_out.answer, "rejected": "0", "answer": held_out.answer},
            {"prompt": "1+2=", "chosen": "3", "rejected": "4", "answer": "3"}]
    if split_of("1+2=", 0.1) == "test":
        pytest.skip("1+2= falls in the test split")
    task = build_task({"name": "preference_pairs", "path": write_rows(tmp_path / "p.jsonl", rows),
                       "verifier": {"name": "addition", "digits": 2}})
    assert {e.prompt for e in task.examples("train", 6, seed=0)} == {"1+2="}


def test_without_answers_the_default_reward_is_the_preference(tmp_path):
    rows = [{"prompt": "Say hi", "chosen": "hi", "rejected": "bye"},
            {"prompt": "Say yo", "chosen": "yo", "rejected": "no", "note": 1}]
    with pytest.raises(ConfigError, match="columns"):  # the extra column differs from the first row's
        build_task({"name": "preference_pairs", "path": write_rows(tmp_path / "bad.jsonl", rows)})
    rows[1].pop("note")
    task = build_task({"name": "preference_pairs", "path": write_rows(tmp_path / "p.jsonl", rows),
                       "test_fraction": 0.01})
    assert [s.name for s in task.default_rewards] == ["preferred"]
    examples = [task.examples("train", 2, seed=0)[0]] * 3
    chosen, rejected = examples[0].columns["chosen"], examples[0].columns["rejected"]
    with pytest.warns(RuntimeWarning, match="returned None"):  # "other" is neither response: no reward
        values = score(task, [RewardSpec("preferred")], examples, [chosen, rejected, "other"])[0]
    assert values[:, 0].tolist() == [1.0, 0.0, 0.0]
    assert not task.is_correct(chosen, examples[0])  # no verifier


def test_scores_answers_and_named_verifiers(tmp_path):
    rows = [{"prompt": "2*3=", "chosen": "6.0", "rejected": "5", "chosen_score": 0.9, "rejected_score": 0.2,
             "answer": 6}]
    path = write_rows(tmp_path / "p.jsonl", rows)
    exact = build_task({"name": "preference_pairs", "path": path, "test_fraction": 0.01})
    numeric = build_task({"name": "preference_pairs", "path": path, "verifier": "numeric", "test_fraction": 0.01})
    example = exact.examples("train", 1, seed=0)[0]
    assert not exact.is_correct("6.0", example) and numeric.is_correct("6.0", example)
    values = score(exact, [RewardSpec("preferred"), RewardSpec("correct")], [example] * 2, ["6.0", "5"])[0]
    assert values[:, 0].tolist() == pytest.approx([0.9, 0.2]) and values[:, 1].tolist() == [0.0, 0.0]
    assert exact.reward_maxima()["preferred"] == pytest.approx(0.9)


@pytest.mark.parametrize("row, message", [
    ({"prompt": "a", "chosen": "b"}, "missing field 'rejected'"),
    ({"prompt": "a", "chosen": ["b"], "rejected": "c"}, "'chosen' must be a string or a number"),
    ({"prompt": "a", "chosen": "b", "rejected": "c", "chosen_score": "high"}, "'chosen_score' must be a number"),
    ({"prompt": "a", "chosen": "b", "rejected": "c", "completions": "x"}, "reserved"),
])
def test_bad_rows_name_the_line(tmp_path, row, message):
    path = write_rows(tmp_path / "p.jsonl", [row])
    with pytest.raises(ConfigError, match=message) as err:
        build_task({"name": "preference_pairs", "path": path})
    assert f"{path}:1" in str(err.value)


def test_bad_verifiers(tmp_path):
    path = write_rows(tmp_path / "p.jsonl", [{"prompt": "a", "chosen": "b", "rejected": "c"}])
    with pytest.raises(ConfigError, match="verifier"):
        build_task({"name": "preference_pairs", "path": path, "verifier": "no_such_check"})
    with pytest.raises(ConfigError, match="registered task"):
        build_task({"name": "preference_pairs", "path": path, "verifier": {"name": "nothing"}})
    for verifier in ("addition", "exact"):
        with pytest.raises(ConfigError, match="no 'answer'"):
            build_task({"name": "preference_pairs", "path": path, "verifier": verifier})


def test_chat_prompts(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "Say hi"}], "chosen": "hi", "rejected": "bye"}]
    task = build_task({"name": "preference_pairs", "path": write_rows(tmp_path / "p.jsonl", rows),
                       "test_fraction": 0.01})
    example = task.examples("train", 1, seed=0)[0]
    assert example.prompt == "Say hi" and example.messages == ({"role": "user", "content": "Say hi"},)


def test_rows_read_with_datasets(tmp_path):
    pytest.importorskip("datasets")
    path = tmp_path / "pairs.csv"
    path.write_text("prompt,chosen,rejected,answer\n1+2=,3,4,3\n2+2=,4,5,4\n")
    task = build_task({"name": "preference_pairs", "path": str(path), "verifier": "exact", "test_fraction": 0.01})
    examples = task.examples("train", 2, seed=0)
    assert {(e.prompt, e.columns["chosen"], e.columns["rejected"], e.answer) for e in examples} == {
        ("1+2=", "3", "4", "3"), ("2+2=", "4", "5", "4")}


def test_the_packaged_example_is_the_default_path():
    task = build_task({"name": "preference_pairs", "verifier": "addition"})
    assert task.path is None and task.pairs_path == EXAMPLE_PAIRS  # machine-independent in configs and docs
    examples = task.examples("train", 50, seed=0)
    assert all(task.is_correct(e.columns["chosen"], e) and not task.is_correct(e.columns["rejected"], e)
               for e in examples)
