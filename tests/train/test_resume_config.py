"""A resumed run uses the configuration it was trained with, or says which key differs."""
import copy

import pytest
import yaml

from polo.cli import main
from polo.core.registry import ConfigError
from polo.train.config import config_changes, load_recipe, resolved_tree
from polo.train.metrics import read_metrics
from polo.train.trainer import Trainer, resume


@pytest.fixture
def run_dir(tiny, tmp_path):
    Trainer(load_recipe("grpo", tiny), tmp_path / "run", log=lambda *_: None).run()
    return tmp_path / "run"


def test_an_empty_config_is_refused_not_read_as_the_default_recipe(run_dir):
    (run_dir / "config.yaml").write_text("")
    with pytest.raises(ConfigError, match="config.yaml is empty"):
        resume(run_dir, log=lambda *_: None)


def test_an_edited_config_is_refused_naming_the_key(run_dir):
    tree = yaml.safe_load((run_dir / "config.yaml").read_text())
    tree["optim"]["lr"] = 0.123
    (run_dir / "config.yaml").write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match=r"optim.lr: 0.0005 → 0.123"):
        resume(run_dir, log=lambda *_: None)


def test_overrides_on_resume_only_extend_the_run(run_dir):
    with pytest.raises(ConfigError, match="refused: optim.lr"):
        resume(run_dir, log=lambda *_: None, overrides=["optim.lr=0.1"])
    assert main(["train", "--resume", str(run_dir), "train.steps=5"]) == 0
    assert [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["train"]["steps"] == 5
    assert main(["train", "--resume", str(run_dir), "grpo"]) == 2  # a recipe with --resume: one line, refused


def test_run_folder_paths_stay_where_they_are_asked(tiny, tmp_path):
    with pytest.raises(ConfigError, match="name: String should match pattern"):
        load_recipe("grpo", [*tiny, "name=../../escape"])
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["train", "grpo", *tiny, f"--run-dir={a_file}"]) == 2


def test_a_setting_added_since_the_run_counts_as_unchanged_at_its_default():
    """A checkpoint of an older polo lacks settings added since; resuming it must not be refused for them."""
    now = resolved_tree(load_recipe("grpo"))
    older = copy.deepcopy(now)
    del older["train"]["log_samples_every"], older["advantage"]["eps"]
    assert config_changes(older, now) == []
    changed = resolved_tree(load_recipe("grpo", ["train.log_samples_every=5"]))
    assert config_changes(older, changed) == ["train.log_samples_every: 0 → 5"]
