"""Arena files: both forms, override order, and clear errors for bad files."""
import pytest

from polo.arena import load_arena
from polo.arena.spec import task_overrides
from polo.core.registry import ConfigError

from .helpers import write_arena


def test_shipped_default_arena():
    arena = load_arena("default")
    assert set(arena.labels) >= {"grpo", "dr_grpo", "rloo", "gspo", "ppo"}
    assert len(arena.runs) == len(arena.labels) * len(arena.file.seeds) and len(arena.file.seeds) == 3
    for run in arena.runs:
        recipe = run.load()
        assert recipe.seed == run.seed and recipe.train.threads == 1
        assert recipe.train.steps == arena.file.budget.steps


def test_entries_form_orders_overrides(tmp_path):
    path = write_arena(tmp_path / "a.yaml", task={"name": "addition"}, budget={"steps": 7, "minutes": 1.5},
                       overrides=["optim.lr=1e-4"],
                       entries=[{"recipe": "grpo"}, {"label": "rloo_lr", "recipe": "rloo", "overrides": ["optim.lr=2e-4"]}])
    arena = load_arena(path, ["rollout.temperature=0.9"])
    assert arena.labels == ("grpo", "rloo_lr")
    assert [r.name for r in arena.runs] == ["grpo_s0", "grpo_s1", "rloo_lr_s0", "rloo_lr_s1"]
    grpo, rloo = arena.runs[0].load(), arena.runs[2].load()
    assert (grpo.optim.lr, rloo.optim.lr) == (1e-4, 2e-4)  # entry overrides come after the common ones
    assert rloo.train.steps == 7 and rloo.train.max_minutes == 1.5 and rloo.rollout.temperature == 0.9
    assert "seed=<seed>" not in arena.shared_overrides and "train.threads=1" in arena.shared_overrides


def test_variants_form(tmp_path):
    path = write_arena(tmp_path / "a.yaml", entries=[], recipe="grpo",
                       variants=[{"label": "lr_low", "overrides": ["optim.lr=1e-4"]}, {"label": "lr_high"}])
    arena = load_arena(path)
    assert arena.labels == ("lr_low", "lr_high")
    assert {r.recipe for r in arena.runs} == {"grpo"} and arena.runs[0].load().optim.lr == 1e-4


def test_task_overrides_are_dotted():
    assert task_overrides({"name": "countdown", "opts": {"n": 3}}) == ['task.name="countdown"', "task.opts.n=3"]


@pytest.mark.parametrize("fields, message", [
    ({"entries": [{"recipe": "no_such_recipe"}]}, "recipe 'no_such_recipe' not found; shipped recipes:"),
    ({"entries": [{"recipe": "grpo", "overrides": ["optim.nope=1"]}]}, "entry 'grpo'"),
    ({"entries": [{"recipe": "grpo", "lr": 1}]}, "unknown key 'entries.0.lr'"),
    ({"seed": [0]}, "unknown key 'seed'"),
    ({"recipe": "grpo", "variants": [{"label": "a"}]}, "either 'entries' or 'recipe'"),
    ({"entries": [{"recipe": "grpo"}, {"recipe": "grpo"}]}, "labels repeat"),
    ({"entries": [{"recipe": "grpo", "label": "a/b"}]}, "entries.0.label"),
    ({"budget": {}}, "budget: give steps, minutes or both"),
    ({"seeds": [1, 1]}, "seeds repeat"),
    ({"target_accuracy": 2}, "target_accuracy"),
])
def test_bad_arena_files_fail_clearly(tmp_path, fields, message):
    with pytest.raises(ConfigError, match="invalid arena|entry") as err:
        load_arena(write_arena(tmp_path / "a.yaml", **fields))
    assert message in str(err.value)


def test_unknown_arena_name_lists_shipped():
    with pytest.raises(ConfigError, match="shipped arenas: .*default"):
        load_arena("no_such_arena")


def test_cli_reports_a_bad_arena_file_without_training(tmp_path):
    from polo.cli import main

    path = write_arena(tmp_path / "a.yaml", entries=[{"recipe": "grpo", "overrides": ["train.nope=1"]}])
    assert main(["arena", str(path), f"--out={tmp_path / 'out'}"]) == 2
    assert not (tmp_path / "out").exists()


def test_recipe_files_beside_the_arena_file(tmp_path):
    (tmp_path / "mine.yaml").write_text("name: mine\nadvantage: {name: rloo}\n")
    arena = load_arena(write_arena(tmp_path / "a.yaml", entries=[{"recipe": "mine.yaml"}]))
    assert arena.labels == ("mine",) and arena.runs[0].load().name == "mine"
