"""The configuration reference: docs/config.md is current, `polo config` prints every resolved key with its
description and default, and the TRL / verl table names real polo keys."""
from pathlib import Path

import pytest

from polo.cli import main
from polo.config_equivalents import EQUIVALENTS
from polo.config_reference import COMPONENTS, keys, reference_markdown, resolved_keys, show, type_name
from polo.train.config import RECIPES_DIR, Optim, Recipe, load_recipe


def test_docs_config_is_generated_from_the_models():
    path = Path(__file__).resolve().parent.parent / "docs" / "config.md"
    assert path.read_text() == reference_markdown(), "run: python -m polo.config_reference > docs/config.md"


def test_every_recipe_key_has_a_description():
    missing = [k.key for k in keys(Recipe) if not k.description]
    assert not missing, f"add a docstring under these fields: {missing}"


def test_keys_carry_type_bounds_and_default():
    by_key = {k.key: k for k in keys(Optim, "optim.")}
    assert by_key["optim.lr"].type == "float, > 0" and by_key["optim.lr"].default == 5e-4
    assert by_key["optim.schedule"].type == '"constant" | "linear" | "cosine"'
    assert by_key["optim.betas"].default == [0.9, 0.999]
    assert type_name(dict[str, int] | None) == "dict[str, int] | None"


def test_polo_config_prints_values_descriptions_and_defaults(capsys):
    assert main(["config", "grpo", "optim.lr=0.001"]) == 0
    lines = {line.split(" = ")[0]: line for line in capsys.readouterr().out.splitlines() if " = " in line}
    assert "Completions per prompt" in lines["rollout.samples_per_prompt"]
    assert lines["optim.lr"].startswith("optim.lr = 0.001 ") and "(default: 0.0005)" in lines["optim.lr"]
    assert lines["train.minibatches"].startswith("train.minibatches = 4 ")  # the recipe's value, not the default
    assert lines["advantage.name"].startswith("advantage.name = grpo ") and "std_g R" in lines["advantage.name"]
    assert "policy_loss.dual_clip" in lines and "task.digits" in lines


def test_a_value_with_a_control_character_stays_on_one_line():
    assert show("\n") == '"\\n"' and show(" | ") == "' | '" and show(0.5) == "0.5"
    tab = show("\t")
    assert load_recipe("vpo", [f"advantage.separator={tab}"]).advantage["separator"] == "\t"  # round trip


def test_polo_config_without_a_recipe_shows_the_defaults(capsys):
    assert main(["config", "rollout.top_k=5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# custom") and "rollout.top_k = 5 " in out


@pytest.mark.parametrize("recipe", sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))
def test_every_resolved_key_of_every_recipe_is_described(recipe):
    undescribed = [k.key for k, _ in resolved_keys(load_recipe(recipe)) if not k.type]
    assert not undescribed, undescribed


def test_trl_and_verl_equivalents_name_valid_polo_keys():
    valid = {k.key for k in keys(Recipe)} | {f"{key.split('.')[0]}.{k.key}" for key, registry in COMPONENTS.items()
                                             for _, cls in registry for k in keys(cls)}
    names = {e.name for e in EQUIVALENTS}
    assert {"num_generations", "beta", "epsilon_high", 'loss_type="bnpo"', "actor_rollout_ref.rollout.n",
            "algorithm.adv_estimator"} <= names
    for e in EQUIVALENTS:
        for item in e.polo:
            if "=" in item:
                load_recipe({}, [item])
            else:
                assert item in valid, (e.name, item)
