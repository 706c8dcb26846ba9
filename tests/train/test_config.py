import pytest
import yaml

from polo.core.registry import ConfigError
from polo.train.config import dump_recipe, load_recipe


def test_shipped_recipe_loads_by_name_and_path():
    a = load_recipe("grpo")
    b = load_recipe("polo/recipes/grpo.yaml")
    assert a == b and a.advantage["name"] == "grpo"


def test_override_sets_nested_keys_and_types():
    r = load_recipe("grpo", ["optim.lr=0.003", "advantage.scale_by_std=false", "train.steps=7"])
    assert r.optim.lr == 0.003 and r.advantage["scale_by_std"] is False and r.train.steps == 7


def test_unknown_component_lists_valid_names():
    with pytest.raises(ConfigError, match=r"unknown advantage 'nope'.*grpo.*rloo"):
        load_recipe("grpo", ["advantage.name=nope"])


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"unknown key 'optim.lrr'"):
        load_recipe("grpo", ["optim.lrr=1"])


def test_unknown_component_hyperparameter_is_named():
    with pytest.raises(ConfigError, match=r"policy_loss.clip_hgih"):
        load_recipe("grpo", ["policy_loss.clip_hgih=0.3"])


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError, match=r"rollout.samples_per_prompt.*'many'"):
        load_recipe("grpo", ["rollout.samples_per_prompt=many"])


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key.sub=value"):
        load_recipe("grpo", ["optim.lr"])


def test_missing_recipe_lists_shipped():
    with pytest.raises(ConfigError, match="shipped recipes: .*grpo"):
        load_recipe("no_such_recipe")


def test_dump_round_trips_with_every_default_filled_in(tmp_path):
    r = load_recipe("ppo", ["seed=3"])
    path = tmp_path / "config.yaml"
    path.write_text(dump_recipe(r))
    assert dump_recipe(load_recipe(path)) == dump_recipe(r)
    tree = yaml.safe_load(path.read_text())
    assert tree["seed"] == 3 and tree["policy_loss"]["dual_clip"] == 3.0
    assert "dual_clip" in yaml.safe_load(dump_recipe(load_recipe("grpo")))["policy_loss"]  # a default grpo leaves
    assert tree["engine"] == {"name": "single_turn", "vllm": None} and tree["roles"]["critic"]["lr"] == 0.001
    ngrpo = yaml.safe_load(dump_recipe(load_recipe("ngrpo")))
    assert "eps" in ngrpo["advantage"] and ngrpo["prompt_sampler"]["name"] == "dynamic_sampling"
