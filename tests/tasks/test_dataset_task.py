"""The ``dataset`` task (local data through Hugging Face ``datasets``), absolute data paths and remembered plugins."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from polo.cli import main
from polo.core.registry import ConfigError
from polo.tasks import build_task, score
from polo.tasks.rewards import RewardSpec

datasets = pytest.importorskip("datasets")

ROWS = [{"q": f"{a}+{b}=", "sol": str(a + b), "level": a % 3} for a in range(10) for b in range(10)]


def write(tmp_path: Path, kind: str) -> Path:
    table = datasets.Dataset.from_list(ROWS)
    if kind == "jsonl":
        path = tmp_path / "d.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif kind == "csv":
        path = tmp_path / "d.csv"
        table.to_csv(str(path), index=False)
    elif kind == "parquet":
        path = tmp_path / "d.parquet"
        table.to_parquet(str(path))
    else:
        path = tmp_path / "saved"
        datasets.DatasetDict({"train": table, "test": table.select(range(5))}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet", "disk"])
def test_sources_with_custom_columns(tmp_path, kind):
    path = write(tmp_path, kind)
    task = build_task({"name": "dataset", "path": str(path), "prompt_column": "q", "answer_column": "sol"})
    train, test = task.examples("train", 50, seed=0), task.examples("test", 5, seed=0)
    assert {e.prompt for e in train}.isdisjoint({e.prompt for e in test})
    example = next(e for e in train if e.prompt == "3+4=") if any(e.prompt == "3+4=" for e in train) else train[0]
    assert example.answer == str(sum(map(int, example.prompt[:-1].split("+"))))
    assert example.columns == {"level": int(example.prompt.split("+")[0]) % 3} and example.messages is None
    assert task.is_correct(example.answer, example) and not task.is_correct("x", example)
    assert task.max_completion_chars == 2 and task.default_rewards == [RewardSpec("correct", 1.0)]


def test_save_to_disk_test_split(tmp_path):
    task = build_task({"name": "dataset", "path": str(write(tmp_path, "disk")), "prompt_column": "q",
                       "answer_column": "sol", "test_split": "test"})
    assert {e.prompt for e in task.examples("test", 20, seed=1)} == {r["q"] for r in ROWS[:5]}
    with pytest.raises(ConfigError, match="no split 'valid'; its splits: train, test"):
        build_task({"name": "dataset", "path": str(tmp_path / "saved"), "prompt_column": "q", "split": "valid"})


def test_messages_with_a_system_prompt(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": f"say {i}"}], "answer": str(i)} for i in range(20)]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = build_task({"name": "dataset", "path": str(path), "system_prompt": "Be brief."})
    example = task.examples("train", 1, seed=0)[0]
    n = example.answer
    assert example.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": f"say {n}"})
    assert example.prompt == f"Be brief.\nsay {n}"
    plain = build_task({"name": "dataset", "path": str(write(tmp_path, "jsonl")), "prompt_column": "q",
                        "answer_column": "sol", "system_prompt": "Add."}).examples("train", 1, seed=0)[0]
    assert plain.messages[0] == {"role": "system", "content": "Add."} and plain.messages[1]["role"] == "user"


def test_chat_template_renders_the_messages(tmp_path):
    from polo.policy.policy import Policy
    from polo.policy.tiny import TinyModelConfig, build_tiny_model
    from polo.policy.tokenizer import build_char_tokenizer
    from polo.tasks import Example

    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    model = build_tiny_model(TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32),
                             tokenizer)
    example = Example("S\nhi", "", {}, ({"role": "system", "content": "S"}, {"role": "user", "content": "hi"}))
    ids, mask = Policy(model, tokenizer, chat_template=True).encode_prompts([example, "yo"])
    texts = tokenizer.batch_decode([row[m.bool()] for row, m in zip(ids, mask)])
    assert texts == ["<system>S<user>hi<assistant>", "<user>yo<assistant>"]
    ids, mask = Policy(model, tokenizer).encode_prompts([example])
    assert tokenizer.decode(ids[0][mask[0].bool()], skip_special_tokens=True) == "S\nhi"


def test_answer_optional(tmp_path):
    path = write(tmp_path, "parquet")
    task = build_task({"name": "dataset", "path": str(path), "prompt_column": "q", "answer_column": None})
    example = task.examples("train", 1, seed=0)[0]
    assert example.answer == "" and set(example.columns) == {"sol", "level"}
    assert task.task_rewards() == {} and not task.is_correct("anything", example)
    for attribute in ("default_rewards", "max_completion_chars"):
        with pytest.raises(ConfigError, match="no answer_column"):
            getattr(task, attribute)
    with pytest.raises(ConfigError, match="set model.path"):
        task.demonstration(example)
    with pytest.raises(ConfigError, match="verifier 'exact' compares with the answer"):
        build_task({"name": "dataset", "path": str(path), "prompt_column": "q", "answer_column": None,
                    "verifier": "exact"})
    rewards, _, _ = score(task, [RewardSpec("contains_answer", 1.0)], [example], ["x"])
    assert rewards.shape == (1, 1)


def test_bad_sources_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="never the Hugging Face Hub"):
        build_task({"name": "dataset", "path": "openai/gsm8k"})
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(ConfigError, match="is not a .jsonl, .json, .parquet, .csv file"):
        build_task({"name": "dataset", "path": str(tmp_path / "d.txt")})
    with pytest.raises(ConfigError, match="no column 'question'; its columns: q, sol, level"):
        build_task({"name": "dataset", "path": str(write(tmp_path, "csv")), "prompt_column": "question"})
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)
    with pytest.raises(ConfigError, match=r"pip install 'polo\[data\]'"):
        build_task({"name": "dataset", "path": str(tmp_path / "d.csv"), "prompt_column": "q"})


def test_jsonl_given_parquet_says_use_dataset(tmp_path, capsys):
    path = write(tmp_path, "parquet")
    assert main(["train", "grpo", f"task={{name: jsonl, path: {path}}}"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "not UTF-8" in err and "use task.name=dataset" in err and "Traceback" not in err


PLUGIN = '''
from polo.tasks import register_reward

open("imported", "w").close()  # in the working directory: shows whether the file ran


@register_reward("always_one", max_value=1.0)
def always_one(prompts, completions, **kwargs):
    return [1.0] * len(completions)
'''


def test_absolute_paths_and_plugins_are_remembered(tmp_path, monkeypatch, tiny, capsys):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir(), elsewhere.mkdir()
    write(work, "jsonl")
    (work / "p.py").write_text(PLUGIN)
    monkeypatch.chdir(work)
    run = work / "run"
    argv = ["--plugin", "p.py", "train", "grpo", "task={name: dataset, path: d.jsonl, prompt_column: q, "
            "answer_column: sol, verifier: always_one}", "rewards=[{name: always_one, weight: 1.0}]",
            "--run-dir", str(run), *tiny, "train.steps=2"]
    assert main(argv) == 0
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["task"]["path"] == str(work / "d.jsonl") and config["plugins"] == [str(work / "p.py")]
    # a fresh process, elsewhere: the run names its plugin but never imports it on its own
    polo = [sys.executable, "-m", "polo.cli"]
    refused = subprocess.run([*polo, "eval", str(run), "--size", "4"], cwd=elsewhere, capture_output=True, text=True)
    assert refused.returncode == 2 and not (elsewhere / "imported").exists()
    assert f"plugin files that are not loaded: {work / 'p.py'}" in " ".join(refused.stderr.split())
    loaded = subprocess.run([*polo, "--plugin", str(work / "p.py"), "eval", str(run), "--size", "4"], cwd=elsewhere,
                            capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["greedy_accuracy"] == 1.0


def test_eval_hints_at_a_missing_plugin(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"task": {"name": "not_registered_here"}}))
    assert main(["eval", str(run)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unknown task 'not_registered_here'" in err and "recorded no plugin file" in err and "--plugin" in err
