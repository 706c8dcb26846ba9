"""Control recipes and their runs: validation, the CLI, checkpoints and a killed run resumed bit for bit, and a
learning test of the PPO base."""
import json

import pytest

from polo.cli import main
from polo.core.registry import ConfigError
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer
from tests.control.kill_and_resume import assert_same_rows, killed_after, metrics_rows

SMALL = ["env.num_envs=2", "engine.num_steps=64", "total_steps=384", "epochs=2", "minibatches=4", "eval_episodes=2",
         "eval_every=1", "checkpoint_every=1"]


def test_recipe_errors_name_the_bad_setting():
    with pytest.raises(ConfigError, match="epoch"):
        load_control_recipe("ppo_continuous", ["epoch=3"])
    with pytest.raises(ConfigError, match="disagree"):
        load_control_recipe("ppo_continuous", ["iterations=7"])
    with pytest.raises(ConfigError, match="control policy 'gausian'"):
        load_control_recipe("ppo_continuous", ["policy.name=gausian"])
    with pytest.raises(ConfigError, match="kind: control"):
        load_control_recipe({"name": "x", "method": "ppo"})


def test_total_steps_sets_iterations_and_is_what_config_yaml_keeps():
    recipe = load_control_recipe("ppo_continuous", SMALL)
    assert recipe.method.iterations == 3
    assert "iterations" not in recipe.tree() and recipe.tree()["total_steps"] == 384


@pytest.mark.parametrize("sample_freq", [4, 5])
def test_killed_run_resumes_bit_for_bit(tmp_path, sample_freq):
    """The shipped recipe (gSDE); with a period of 5 the exploration matrices are held across the checkpoint
    (64 steps per iteration), so their draws and call counter must be restored too."""
    trainer, whole, killed = killed_after("ppo_continuous", SMALL + [f"policy.sde_sample_freq={sample_freq}"],
                                         tmp_path, 2)
    assert trainer.method._policy.extra_state()["sde_calls"] == (2 * 64 - 1) % sample_freq + 1  # since the last draw
    trainer.run()
    assert_same_rows(killed, whole)


def test_cli_trains_and_extends_a_control_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "ppo_continuous", *SMALL, f"--run-dir={run}"]) == 0
    assert (run / "curves.png").is_file() and (run / "config.yaml").is_file()
    first = metrics_rows(run)
    assert [r["step"] for r in first] == [0, 1, 2, 3]
    assert {"eval/return", "train/env_steps", "policy/approx_kl", "loss/value"} <= set(first[-1])
    assert main(["train", "--resume", str(run), "total_steps=512"]) == 0
    assert metrics_rows(run)[-1]["step"] == 4
    assert main(["train", "--resume", str(run), "lr=0.1"]) == 2
    assert "refused: lr" in capsys.readouterr().err
    assert main(["eval", str(run)]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["iteration"] == 4 and evaluated["eval/return"] == metrics_rows(run)[-1]["eval/return"]
    assert main(["config", "ppo_continuous", "lr=0.01"]) == 0
    assert "lr: 0.01" in capsys.readouterr().out


def test_ppo_learns_cartpole(tmp_path):
    """Seed 0: PPO with a categorical policy takes CartPole-v1's deterministic return from ~20 to above 150 in
    40k steps."""
    recipe = load_control_recipe("ppo_continuous", [
        "env.id=CartPole-v1", "policy={name: categorical, hidden: [64, 64]}", "env.normalize_obs=true",
        "env.normalize_reward=true", "value_clip=0.2", "advantage.gamma=0.99", "env.num_envs=4",
        "engine.num_steps=256", "total_steps=40960", "minibatches=8", "epochs=4", "lr=2.5e-3", "eval_every=40",
        "checkpoint_every=40", "seed=0"])
    out = ControlTrainer(recipe, tmp_path / "cp", log=lambda m: None).run()
    assert out[0]["eval/return"] < 100
    assert out[-1]["eval/return"] > 150
