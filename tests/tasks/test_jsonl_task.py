"""The jsonl task: a user file round trip, extra columns reaching rewards, verifiers, clear errors."""
import json

import pytest

from polo.core.registry import ConfigError
from polo.tasks import build_task, register_reward, score

ROWS = [
    {"prompt": f"{i} apples plus 1?", "answer": str(i + 1), "unit": "apple" if i % 2 else "pear"}
    for i in range(40)
]


def write(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return str(path)


@register_reward("test_unit_reward")
def unit_reward(prompts, completions, answer, unit, **kwargs):
    """1.0 if the completion names the row's unit (column ``unit``) and contains the answer."""
    return [float(u in c and a in c) for c, a, u in zip(completions, answer, unit)]


def test_round_trip_with_an_extra_column_reaching_the_reward(tmp_path):
    task = build_task({"name": "jsonl", "path": write(tmp_path, ROWS + [""]), "test_fraction": 0.25})
    train, test = task.examples("train", 100, seed=0), task.examples("test", 40, seed=0)
    assert train == task.examples("train", 100, seed=0) and train != task.examples("train", 100, seed=1)
    assert not {ex.prompt for ex in train} & {ex.prompt for ex in test}
    assert len({ex.prompt for ex in train} | {ex.prompt for ex in test}) == len(ROWS)  # cycles all rows
    ex = train[0]
    row = next(r for r in ROWS if r["prompt"] == ex.prompt)
    assert ex.answer == row["answer"] and dict(ex.columns) == {"unit": row["unit"]}
    assert task.demonstration(ex) == ex.answer and task.is_correct(ex.answer, ex)
    assert task.max_completion_chars == 2
    good = f"{ex.answer} {ex.columns['unit']}"
    rewards, names, _ = score(task, ["correct", "test_unit_reward"], [ex, ex], [ex.answer, good])
    assert names == ("correct", "test_unit_reward") and rewards.tolist() == [[1.0, 0.0], [0.0, 1.0]]


@pytest.mark.parametrize(
    "verifier, right, wrong",
    [
        ("exact", " 42 ", "42."),
        ("numeric", "It is 42.0 apples", "41"),
        ("contains", "so 42!", "4 2"),
        ("test_unit_reward", "42 pear", "42"),
    ],
)
def test_verifiers(tmp_path, verifier, right, wrong):
    path = write(tmp_path, [{"prompt": f"q{i}", "answer": 42, "unit": "pear"} for i in range(30)])
    task = build_task({"name": "jsonl", "path": path, "verifier": verifier})
    ex = task.examples("train", 1, seed=0)[0]
    assert ex.answer == "42"
    assert task.is_correct(right, ex) and not task.is_correct(wrong, ex)


@pytest.mark.parametrize(
    "lines, message",
    [
        ([ROWS[0], "{not json"], r"data.jsonl:2: invalid JSON"),
        ([ROWS[0], "", {"answer": "1"}], r"data.jsonl:3: missing field 'prompt'"),
        ([{"prompt": "p"}], r"data.jsonl:1: missing field 'answer'"),
        ([[1, 2]], r"data.jsonl:1: expected a JSON object, got list"),
        ([{"prompt": 3, "answer": "1"}], r"data.jsonl:1: field 'prompt' must be a string, got 3"),
        ([{"prompt": "p", "answer": None}], r"data.jsonl:1: field 'answer' must be a string or a number"),
        ([ROWS[0], {"prompt": "p", "answer": "1", "level": 2}], r"data.jsonl:2: columns \['level'\] differ"),
        ([{"prompt": "p", "answer": "1", "completions": 2}], r"data.jsonl:1: column names \['completions'\]"),
        ([""], r"has no rows"),
    ],
)
def test_bad_files_name_the_line(tmp_path, lines, message):
    with pytest.raises(ConfigError, match=message):
        build_task({"name": "jsonl", "path": write(tmp_path, lines)})


def test_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="task.path: no such file '.*missing.jsonl'"):
        build_task({"name": "jsonl", "path": str(tmp_path / "missing.jsonl")})
    with pytest.raises(ConfigError, match="task.verifier.*'fuzzy'.*exact, numeric, contains"):
        build_task({"name": "jsonl", "path": write(tmp_path, ROWS), "verifier": "fuzzy"})
    with pytest.raises(ConfigError, match="task.path"):
        build_task({"name": "jsonl"})
    task = build_task({"name": "jsonl", "path": write(tmp_path, ROWS[:1]), "test_fraction": 0.01})
    with pytest.raises(ValueError, match="no test rows"):
        task.examples("test", 1, seed=0)
