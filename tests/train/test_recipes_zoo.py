"""The algorithm-zoo recipes load and build their components (training is covered by the smoke test)."""
import pytest

from polo.train.config import load_recipe

ZOO = ["r2vpo", "drpo", "ctpo", "trust_the_batch", "dgpo", "sapo", "clip_cov", "kl_cov", "gmpo", "dro"]


@pytest.mark.parametrize("name", ZOO)
def test_zoo_recipe_loads(name):
    recipe = load_recipe(name)
    assert recipe.name == name and recipe.description
    built = recipe.built().components
    assert built["policy_loss"].registry_name == recipe.policy_loss["name"]
