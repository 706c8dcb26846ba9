"""An arena of control recipes: validation, training through ``polo train`` subprocesses, and a report ranked
by the control method's evaluation metric."""
import json

import pytest
import yaml

pytest.importorskip("gymnasium")

from polo.arena import load_arena, run_arena, write_report  # noqa: E402
from polo.core.registry import ConfigError  # noqa: E402

SMALL = ["env.id=CartPole-v1", "policy={name: categorical}", "env.num_envs=2", "engine.num_steps=64",
         "total_steps=null", "epochs=2", "minibatches=2", "eval_episodes=2", "eval_every=1", "checkpoint_every=1"]


def _write(path, **fields):
    tree = {"name": "c", "seeds": [0, 1], "budget": {"steps": 2}, "overrides": SMALL,
            "recipe": "ppo_continuous", "variants": [{"label": "lr_high", "overrides": ["lr=3e-3"]},
                                                     {"label": "lr_low", "overrides": ["lr=1e-4"]}]}
    tree.update(fields)
    path.write_text(yaml.safe_dump(tree))
    return path


def test_control_arena_defaults_to_the_methods_headline_and_sets_iterations(tmp_path):
    arena = load_arena(_write(tmp_path / "a.yaml"))
    assert arena.file.metric == "eval/return"
    assert {"iterations=2", "seed=1", "threads=1"} <= set(arena.runs[1].overrides)
    assert arena.runs[1].load().method.iterations == 2


def test_control_and_language_model_recipes_do_not_mix(tmp_path):
    path = _write(tmp_path / "a.yaml", recipe=None, variants=[],
                  entries=[{"recipe": "ppo_continuous"}, {"recipe": "grpo"}])
    with pytest.raises(ConfigError, match="cannot share an arena"):
        load_arena(path)
    with pytest.raises(ConfigError, match="'task' overrides a language-model task"):
        load_arena(_write(tmp_path / "b.yaml", task={"name": "addition"}))


def test_control_arena_trains_and_reports(tmp_path):
    arena, out = load_arena(_write(tmp_path / "a.yaml", seeds=[0])), tmp_path / "out"
    status = run_arena(arena, out, workers=2, log=lambda m: None)
    assert set(status.values()) == {0}
    report = write_report(arena, out)
    assert not report.missing
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metric"] == "eval/return"
    assert (out / "figures" / "accuracy_vs_step.png").is_file()
    md = (out / "report.md").read_text()
    assert "eval/return vs step" in md and "## Ranking by final eval/return" in md
    assert "| entry | seed | warm-start eval/return | final eval/return | gain | time to " in md
