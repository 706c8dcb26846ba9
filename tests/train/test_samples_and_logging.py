"""samples.jsonl, `polo eval --show`, the logging backends (csv, TensorBoard, wandb) and TRL's metric names."""
import csv
import importlib.util
import json
import shutil
import sys

import pytest

from polo.cli import main
from polo.core.registry import ConfigError
from polo.tasks import build_task
from polo.train.backends import backend_callbacks
from polo.train.builtin_callbacks import builtin_callbacks
from polo.train.callbacks import Callback
from polo.train.config import load_recipe
from polo.train.metrics import read_metrics
from polo.train.trainer import Trainer, resume

SAMPLES = 3
OPTIONAL = [name for name in ("tensorboard", "wandb") if importlib.util.find_spec(name)]


class KeepRollouts(Callback):
    def __init__(self):
        self.steps = {}

    def on_step_end(self, trainer, row, rollouts):
        self.steps[row["step"]] = rollouts


def _overrides(*extra):
    from conftest import TINY  # the tiny fixture is function-scoped; this run is shared by the module

    return [*TINY, "train.steps=2", "train.save_every=1", "train.log_samples_every=1",
            f"train.log_samples={SAMPLES}", f"train.report_to=[jsonl,csv,{','.join(OPTIONAL)}]", *extra]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("logging") / "run"
    kept, messages = KeepRollouts(), []
    trainer = Trainer(load_recipe("grpo", _overrides()), run_dir, log=messages.append, callbacks=[kept])
    trainer.run()
    return run_dir, trainer, kept.steps, messages


def test_samples_jsonl_holds_prompt_completion_rewards_and_advantage(run):
    run_dir, trainer, steps, messages = run
    records = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1] * SAMPLES + [2] * SAMPLES
    for step, rollouts in steps.items():
        batch = rollouts.batch
        B = batch.batch_size
        for record, i in zip([r for r in records if r["step"] == step], [0, B // 3, 2 * B // 3]):
            assert record["prompt"] == "<bos>" + rollouts.examples[i].prompt  # as the model sees it, no padding
            assert record["completion"] == rollouts.completions[i]
            assert record["rewards"] == {n: pytest.approx(float(batch.rewards[i, k]))
                                         for k, n in enumerate(batch.reward_names)}
            weights = dict(zip(batch.reward_names, batch.reward_weights.tolist()))
            assert record["reward"] == pytest.approx(sum(weights[n] * v for n, v in record["rewards"].items()))
            valid = batch.response_mask[i].bool()
            assert record["advantage"] == pytest.approx(float(batch.advantages[i][valid].mean()), abs=1e-6)
            assert record["correct"] == bool(batch.extras["correct"][i])
    tables = [m for m in messages if "samples at step" in m]
    assert len(tables) == 2 and "advantage" in tables[0] and records[0]["completion"] in tables[0]


def test_trl_names_match_polo_metrics_and_the_batch(run):
    run_dir, trainer, steps, _ = run
    rows = {r["step"]: r for r in read_metrics(run_dir)}
    seen = 0
    for step, rollouts in steps.items():
        row, batch = rows[step], rollouts.batch
        assert row["reward"] == row["reward/total"] == pytest.approx(float(batch.scalar_reward().mean()))
        for k, name in enumerate(batch.reward_names):
            assert row[f"rewards/{name}/mean"] == pytest.approx(row[f"reward/{name}"])
            assert row[f"rewards/{name}/std"] == pytest.approx(float(batch.rewards[:, k].std()))
        reward = batch.scalar_reward()
        stds = [float(reward[batch.group == g].std()) for g in batch.group.unique()]
        assert row["reward_std"] == pytest.approx(sum(stds) / len(stds), abs=1e-6)  # equal groups: mean over rows
        lengths = batch.lengths.float()
        assert row["completions/mean_length"] == pytest.approx(row["response/length"])
        assert (row["completions/min_length"], row["completions/max_length"]) == (lengths.min(), lengths.max())
        assert row["completions/clipped_ratio"] == row["response/truncated_frac"]
        assert row["entropy"] == row["policy/entropy"]
        assert row["clip_ratio/low_mean"] == row["policy/clip_frac_low"]
        assert row["clip_ratio/high_mean"] == row["policy/clip_frac_high"]
        assert "kl" not in row  # kl.coef is 0: neither polo nor TRL logs it
        seen += int(batch.prompt_mask.sum() + lengths.sum())
        assert row["num_tokens"] == seen  # cumulative, as TRL's


def test_csv_has_every_key_in_order_of_first_appearance(run):
    run_dir, *_ = run
    rows = read_metrics(run_dir)
    with open(run_dir / "metrics.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == list(dict.fromkeys(k for r in rows for k in r))
    assert [int(r["step"]) for r in table] == [0, 1, 2]
    assert float(table[2]["reward"]) == rows[2]["reward"] and table[0]["reward"] == ""


def test_tensorboard_scalars_read_back(run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, *_ = run
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    rows = read_metrics(run_dir)
    for key in ("reward/total", "num_tokens", "completions/mean_length", "eval/greedy_accuracy"):
        want = [(r["step"], r[key]) for r in rows if key in r]
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in want]
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)  # stored as float32


def test_wandb_offline_run_is_written_inside_the_run_folder(run):
    pytest.importorskip("wandb")
    run_dir, *_ = run
    run_id = (run_dir / "wandb" / "polo_run_id").read_text().strip()
    offline = list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(offline) == 1 and (offline[0] / f"run-{run_id}.wandb").is_file()


def test_resume_drops_lines_after_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    Trainer(load_recipe("grpo", _overrides("train.report_to=[csv,tensorboard]" if "tensorboard" in OPTIONAL
                                           else "train.report_to=[csv]")), run_dir, log=lambda _: None).run()
    before = read_metrics(run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step_000002")  # as if killed before step 2's checkpoint
    trainer = resume(run_dir, log=lambda _: None)
    assert trainer.step_count == 1
    trainer.run()
    after = read_metrics(run_dir)
    assert [r["num_tokens"] for r in after[1:]] == [r["num_tokens"] for r in before[1:]]  # continued, not restarted
    steps = [json.loads(line)["step"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert steps == [1] * SAMPLES + [2] * SAMPLES
    with open(run_dir / "metrics.csv", newline="") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [0, 1, 2]
    if "tensorboard" in OPTIONAL:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run_dir / "tensorboard"))
        events.Reload()
        assert [(e.step, e.value) for e in events.Scalars("num_tokens")] == [(r["step"], r["num_tokens"])
                                                                            for r in after[1:]]


def test_eval_show_prints_problems_with_greedy_completions(run, capsys):
    run_dir, trainer, *_ = run
    assert main(["eval", str(run_dir), "--size", "4", "--show", "2"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["examples"] == 4  # stdout stays JSON
    examples = build_task(trainer.recipe.task).examples("test", 4, seed=trainer.recipe.seed)
    table = err[err.index("2 test problems"):]
    for column in ("prompt", "greedy completion", "answer", "correct"):
        assert column in table
    for e in examples[:2]:
        assert e.prompt in table and e.answer in table
    assert examples[2].prompt not in table
    assert table.count("True") + table.count("False") == 2


def test_unknown_backend_is_one_line_naming_it(capsys):
    assert main(["train", "grpo", "train.report_to=[jsonl,mlflow]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'mlflow'" in err and "jsonl, csv, tensorboard, wandb" in err


def test_missing_backend_package_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install wandb"):
        backend_callbacks(["jsonl", "wandb"])


def test_default_recipe_needs_no_optional_backend(monkeypatch):
    for name in ("tensorboard", "wandb", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing them raises ImportError
    callbacks = builtin_callbacks(load_recipe("grpo"))
    assert "SampleLog" not in {type(c).__name__ for c in callbacks}  # train.log_samples_every is 0: off
