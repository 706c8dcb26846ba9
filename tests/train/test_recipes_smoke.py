"""Every shipped recipe trains 3 steps on the built-in model as shipped, and writes a complete run folder.

Only sizes change (``TINY``, and ``recipe_extras``: a shorter teacher warm start, vLLM's head size): no recipe
gets a stand-in task, judge or data file here, so a recipe that needs an outside service or file by default fails
this test (vulpo ships the built-in labelled task labelled_addition and a rule judge for that reason)."""
import math

import pytest

from conftest import recipe_extras
from polo.train.config import RECIPES_DIR, load_recipe
from polo.train.trainer import Trainer

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_trains_three_steps(name, tiny, tmp_path):
    recipe = load_recipe(name, [*tiny, *recipe_extras(name)])
    rows = Trainer(recipe, tmp_path, log=lambda *_: None).run()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    for row in rows[1:]:
        keys = ["reward/total", "train/accuracy", "frac_reward_zero_std", "response/length", "advantage/mean",
                "time/sample", "perf/tokens_per_s"]
        if row["advantage/zero_frac"] < 1:  # rows with all-zero advantages may skip the update's forward
            keys.append("policy/entropy")
        for key in keys:
            assert key in row and row[key] is not None and math.isfinite(row[key]), (key, row.get(key))
    assert "eval/greedy_accuracy" in rows[-1]
    assert (tmp_path / "config.yaml").exists() and (tmp_path / "curves.png").exists()
    assert (tmp_path / "checkpoints" / "step_000003" / "policy.safetensors").exists()
