"""Warnings instead of silent surprises: each is one log line, said where the fact becomes known."""
import random
from types import SimpleNamespace

import torch

from polo.policy.policy import Policy
from polo.policy.tiny import TinyModelConfig, build_tiny_model
from polo.policy.tokenizer import build_char_tokenizer
from polo.tasks import Example, Task, build_task, register_task
from polo.train.config import load_recipe
from polo.train.run_warnings import TruncationWarning, data_warnings, held_out_overlap_warning
from polo.train.trainer import Trainer, load_policy
from polo.train.warm_start import supervised_finetune

SMALL = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


class Product(Task):
    """2-digit × 1-digit multiplication: 810 problems, about 730 of them in the train split."""

    max_completion_chars: int = 3

    def sample(self, rng: random.Random) -> Example:
        a, b = rng.randrange(10, 100), rng.randrange(1, 10)
        return Example(f"{a}*{b}=", str(a * b))


@register_task("test_arrows")
class Arrows(Task):
    """60 problems ``"7→"`` → ``"7é"``: a task smaller than the test pools, in characters the char tokenizer lacks."""

    max_completion_chars: int = 3

    def sample(self, rng: random.Random) -> Example:
        n = rng.randrange(60)
        return Example(f"{n}→", f"{n}é")


def tiny_policy() -> Policy:
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    return Policy(build_tiny_model(SMALL, tokenizer), tokenizer)


def warnings_in(lines):
    return [line for line in lines if line.startswith("warning: ")]


def test_no_chat_template_warning_when_none_is_asked_for(tiny, tmp_path):
    tiny_policy().save(tmp_path / "model")
    recipe = load_recipe("grpo", [*tiny, f"model.path={tmp_path / 'model'}"])
    lines = []
    load_policy(recipe, build_task({"name": "addition"}), ["1+2="], lines.append)
    assert warnings_in(lines) == []


def test_chat_template_warning_names_the_setting_and_the_folder(tiny, tmp_path):
    policy = tiny_policy()
    policy.tokenizer.chat_template = None  # a checkpoint without one (the built-in tokenizer has one)
    policy.save(tmp_path / "model")
    task = build_task({"name": "addition"})
    recipe = load_recipe("grpo", [*tiny, f"model.path={tmp_path / 'model'}", "model.chat_template=true"])
    lines = []
    load_policy(recipe, task, ["1+2="], lines.append)
    assert warnings_in(lines) == lines and len(lines) == 1
    assert "model.chat_template=true" in lines[0] and str(tmp_path / "model") in lines[0]


def fake_trainer(max_new_tokens):
    lines = []
    recipe = SimpleNamespace(rollout=SimpleNamespace(max_new_tokens=max_new_tokens))
    return SimpleNamespace(recipe=recipe, max_new_tokens=max_new_tokens or 3, log=lines.append), lines


def test_truncation_warns_once_when_most_completions_are_cut():
    trainer, lines = fake_trainer(None)
    callback = TruncationWarning()
    for step, fraction in enumerate([0.5, 0.25, 0.75, 1.0, 0.9], 1):
        callback.on_step_end(trainer, {"step": step, "response/truncated_frac": fraction}, None)
    assert len(lines) == 1, lines
    assert "75% of step 3's completions hit rollout.max_new_tokens=3 without EOS" in lines[0]
    assert "longest answer + 1" in lines[0] and "\\boxed{}" in lines[0]


def test_truncation_with_a_set_cap_does_not_blame_the_task_length():
    trainer, lines = fake_trainer(16)
    TruncationWarning().on_step_end(trainer, {"step": 1, "response/truncated_frac": 0.6}, None)
    assert len(lines) == 1 and "rollout.max_new_tokens=16" in lines[0] and "longest answer" not in lines[0]


def test_held_out_overlap_is_counted_on_a_small_task():
    drawn = Product().examples("train", 2200, seed=0)
    examples, held_out = drawn[:2000], drawn[2000:]
    seen = {e.prompt for e in examples}
    overlap = sum(e.prompt in seen for e in held_out)
    assert overlap > 150
    message = held_out_overlap_warning(examples, held_out)
    assert message.startswith(f"warning: {overlap} of 200 held-out warm-start checks are also training demonstrations")


def test_a_large_task_gives_no_overlap_or_pool_warning():
    drawn = build_task({"name": "addition"}).examples("train", 2200, seed=0)  # the default warm start's draw
    assert held_out_overlap_warning(drawn[:2000], drawn[2000:]) is None
    pool = build_task({"name": "addition"}).examples("train", 5000, seed=0)  # the default pool
    assert data_warnings(pool, [], builtin_tokenizer=True) == []


def test_a_pool_larger_than_the_task_warns_with_the_distinct_count():
    pool = Product().examples("train", 5000, seed=0)
    distinct = len({e.prompt for e in pool})
    [message] = data_warnings(pool, [], builtin_tokenizer=False)
    assert f"train.train_pool=5000 drew only {distinct} distinct problems" in message


def test_problems_are_counted_by_the_tasks_problem_key():
    """An image task asks one question about many pictures: its problems differ by picture, not by prompt."""
    task = build_task({"name": "shape_count", "colours": 1})
    pool = task.examples("train", 300, seed=0)
    assert len({e.prompt for e in pool}) < 10 and data_warnings(pool, [], builtin_tokenizer=True)
    assert data_warnings(pool, [], builtin_tokenizer=True, key=task.problem_key) == []
    assert held_out_overlap_warning(pool[:200], pool[200:], task.problem_key) is None


def test_characters_the_char_tokenizer_cannot_read_are_named_once():
    pool = [Example(f"{i}+{i}=", str(2 * i)) for i in range(50)]
    evaluation = [Example("café→", "é"), Example("naïve", "x")]
    [message] = data_warnings(pool, evaluation, builtin_tokenizer=True)
    assert "reads 3 characters" in message and "4 occurrences" in message
    assert "'é'" in message and "'→'" in message and "'ï'" in message
    assert data_warnings(pool, evaluation, builtin_tokenizer=False) == []


def test_warm_start_below_its_target_warns_with_both_accuracies(tiny):
    overrides = ["warm_start.steps=4", "warm_start.check_every=2", "warm_start.batch_size=8",
                 "warm_start.examples=1000", "warm_start.check_size=50", "warm_start.target_accuracy=1.0"]
    recipe = load_recipe("grpo", [*tiny, *overrides])
    lines = []
    acc = supervised_finetune(tiny_policy(), Product(), recipe, lines.append)
    found = warnings_in(lines)
    assert len(found) == 2, lines
    assert "held-out warm-start checks are also training demonstrations" in found[0]
    assert (f"stopped at its step cap warm_start.steps=4 with held-out greedy accuracy {acc:.3f}, below "
            f"warm_start.target_accuracy=1.0") in found[1]
    teacher_lines = []  # a role's warm start names the role's settings
    supervised_finetune(tiny_policy(), Product(), recipe, teacher_lines.append, "teacher warm start",
                        "roles.teacher.warm_start")
    assert "raise roles.teacher.warm_start.steps" in warnings_in(teacher_lines)[-1]


def test_a_run_on_a_small_non_ascii_task_says_each_warning_once(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("POLO_CACHE", str(tmp_path / "cache"))  # the warm start runs (and warns) here
    recipe = load_recipe("grpo", [*tiny, "train.steps=2", "task={name: test_arrows}",
                                  "rollout.max_new_tokens=1"])
    lines = []
    Trainer(recipe, tmp_path / "run", lines.append).run()
    found = warnings_in(lines)
    for expected in ("train.train_pool=200 drew only", "as <unk>", "held-out warm-start checks",
                     "completions hit rollout.max_new_tokens=1"):
        assert sum(expected in line for line in found) == 1, (expected, found)
