"""The warm-start cache: keyed by the task files' contents, entries verified by a manifest and rebuilt when
bad, built once by concurrent processes."""
import json

import pytest
import torch

from polo.policy.policy import Policy
from polo.tasks import build_task
from polo.train.config import load_recipe
from polo.train.manifest import MANIFEST
from polo.train.warm_start import ensure_warm_start, verify_entry, warm_start_key

QUICK = ["warm_start.steps=2", "warm_start.batch_size=4", "warm_start.examples=16", "warm_start.check_size=4"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "warm_start"


def _write_rows(path, offset=0):
    path.write_text("".join(json.dumps({"prompt": f"{a}+{a + offset}=", "answer": str(2 * a + offset)}) + "\n"
                            for a in range(60)))


def _recipe(tiny, data):
    recipe = load_recipe("grpo", [*tiny, *QUICK])
    return recipe.model_copy(update={"task": {"name": "jsonl", "path": str(data)}})


def _ensure(recipe):
    lines = []
    path = ensure_warm_start(recipe, build_task(recipe.task), lines.append)
    return path, lines


def _trained(lines):
    return any(line.startswith("warm start: training") for line in lines)


def test_editing_the_jsonl_file_gives_a_new_warm_start(tmp_path, tiny, cache):
    data = tmp_path / "data.jsonl"
    _write_rows(data)
    recipe = _recipe(tiny, data)
    first, lines = _ensure(recipe)
    assert _trained(lines) and verify_entry(first) is None and (first / MANIFEST).is_file()
    again, lines = _ensure(recipe)
    assert again == first and lines == []  # cached
    _write_rows(data, offset=1)  # same path, other contents
    assert warm_start_key(recipe) != first.name
    second, lines = _ensure(recipe)
    assert second != first and _trained(lines) and verify_entry(second) is None


def test_building_a_warm_start_leaves_the_callers_random_state_alone(tmp_path, tiny, cache):
    """The trainer seeds torch, loads its policy (building the warm start if it is not cached), then draws role
    weights (LambdaMix's adapters) from the same generator: a run must not depend on the cache's state."""
    data = tmp_path / "data.jsonl"
    _write_rows(data)
    recipe = _recipe(tiny, data)
    for expect_training in (True, False):
        torch.manual_seed(7)
        path, lines = _ensure(recipe)
        assert _trained(lines) is expect_training
        drawn = torch.rand(4)
        torch.manual_seed(7)
        assert torch.equal(drawn, torch.rand(4))


def test_tasks_without_files_hash_their_knobs_with_defaults_filled_in(tiny):
    """Only file contents join the key beside the config; the task's knobs are hashed with their defaults, so
    writing a default out gives the same entry and changing a task's default (``digits``) would give a new one."""
    import hashlib

    recipe = load_recipe("grpo", tiny)
    knobs = {"name": "addition", "test_fraction": 0.1, "digits": 2}
    warm = recipe.warm_start.model_dump(exclude={"hinted"})  # 0: absent, so entries from before it keep their keys
    expected = json.dumps({"task": knobs, "tiny": recipe.model.tiny.model_dump(),
                           "warm": warm, "seed": recipe.seed, "version": 3}, sort_keys=True)
    assert warm_start_key(recipe) == hashlib.sha256(expected.encode()).hexdigest()[:16]
    assert warm_start_key(load_recipe("grpo", [*tiny, "task.digits=2"])) == warm_start_key(recipe)
    assert warm_start_key(load_recipe("grpo", [*tiny, "task.digits=3"])) != warm_start_key(recipe)


def test_a_hinted_warm_start_is_keyed_by_its_share_and_the_hinted_prompt(tiny):
    keys = {warm_start_key(load_recipe("rgpo", [*tiny, *extra]))
            for extra in ([], ["warm_start.hinted=0.5"], ["engine.template='Hint {guide}|{prompt}'"],
                          ["engine.levels=[0.5, 0.9]"], ["warm_start.hinted=0"])}
    assert len(keys) == 5
    assert warm_start_key(load_recipe("rgpo", [*tiny, "warm_start.hinted=0"])) == warm_start_key(
        load_recipe("grpo", tiny))  # no hints: the plain warm start, shared with every recipe on the task
    # what the engine does after the warm start does not change it
    assert warm_start_key(load_recipe("rgpo", [*tiny, "engine.levels=[0.25, 1.0]"])) == warm_start_key(
        load_recipe("rgpo", tiny))


@pytest.mark.parametrize("damage", ["truncate_weights", "drop_manifest", "drop_tokenizer"])
def test_a_bad_entry_is_rebuilt(tmp_path, tiny, cache, damage):
    data = tmp_path / "data.jsonl"
    _write_rows(data)
    recipe = _recipe(tiny, data)
    path, _ = _ensure(recipe)
    if damage == "truncate_weights":
        weights = path / "model.safetensors"
        with open(weights, "r+b") as f:
            f.truncate(weights.stat().st_size // 2)
        why = "corrupt: model.safetensors"
    elif damage == "drop_manifest":  # as an entry written by an older polo
        (path / MANIFEST).unlink()
        why = "without a manifest"
    else:
        tokenizer = next(p for p in path.iterdir() if p.name.startswith("tokenizer"))
        tokenizer.unlink()
        why = f"missing {tokenizer.name}"
    assert why in verify_entry(path)
    rebuilt, lines = _ensure(recipe)
    assert rebuilt == path and _trained(lines)
    assert any("rebuilding" in line and why in line for line in lines)
    assert verify_entry(path) is None
    Policy.load(path)
    assert not [p for p in cache.iterdir() if ".tmp" in p.name or ".bad" in p.name]


def test_a_corrupt_byte_with_the_right_size_is_caught(tmp_path, tiny, cache):
    data = tmp_path / "data.jsonl"
    _write_rows(data)
    path, _ = _ensure(_recipe(tiny, data))
    weights = path / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 0xFF
    weights.write_bytes(bytes(blob))
    assert "sha256" in verify_entry(path)


def test_concurrent_builders_build_once(tmp_path, tiny, cache, monkeypatch):
    """The second builder waits on the entry's lock (its log says so), then finds the entry cached."""
    import threading

    from polo.train import warm_start

    data = tmp_path / "data.jsonl"
    _write_rows(data)
    recipe = _recipe(tiny, data)
    second_waits = threading.Event()
    real = warm_start.supervised_finetune

    def slow_finetune(*args, **kwargs):  # the first builder finishes only once the second is waiting
        result = real(*args, **kwargs)
        assert second_waits.wait(30)
        return result

    monkeypatch.setattr(warm_start, "supervised_finetune", slow_finetune)
    first_lines, second_lines, paths = [], [], []

    def second_log(line):
        second_lines.append(line)
        if line.startswith("waiting"):
            second_waits.set()

    first = threading.Thread(target=lambda: paths.append(
        ensure_warm_start(recipe, build_task(recipe.task), first_lines.append)))
    first.start()
    while not _trained(first_lines):  # the first holds the lock
        assert first.is_alive()
        second_waits.wait(0.01)
    paths.append(ensure_warm_start(recipe, build_task(recipe.task), second_log))
    first.join(30)
    assert len(paths) == 2 and paths[0] == paths[1] and verify_entry(paths[0]) is None
    assert _trained(first_lines) and not _trained(second_lines)
    assert len(second_lines) == 1 and "waiting for the lock" in second_lines[0]


def test_the_base_preset_warm_starts_on_a_ladder_task_through_the_cache(cache):
    recipe = load_recipe("grpo", [*QUICK, "warm_start.target_accuracy=null", "model.tiny.preset=base",
                                  "task.name=addition_trace", "task.digits=2"])
    path, lines = _ensure(recipe)
    assert _trained(lines) and verify_entry(path) is None
    config = json.loads((path / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"] // config["num_attention_heads"]) == (6, 64)
    assert config["max_position_embeddings"] == 512
    again, lines = _ensure(recipe)
    assert again == path and not _trained(lines)  # cached: the second call trains nothing
    assert Policy.load(path).tokenizer.chat_template is not None
    assert warm_start_key(recipe) != warm_start_key(load_recipe("grpo", [*QUICK, "warm_start.target_accuracy=null",
                                                                         "task.name=addition_trace", "task.digits=2"]))
