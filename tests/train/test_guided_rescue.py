"""KEPO's and RGPO's hint-guided rescue acts at the recipes' shipped settings.

A group whose rollouts all fail is retried under a hinted prompt (the ``guided`` engine); the retry helps only a
model that can read a hint, as the papers' LLMs can. The built-in model warm-started on plain prompts never saw
one: a 4-step ``kepo`` run rescued 0 of 59 triggered groups. The recipes therefore show a quarter of the warm
start's rows under the engine's hinted prompt (``warm_start.hinted``). Here each shipped recipe (engine, acceptance
rule, hinted share, the built-in model's size and warm start) runs 3 steps of 8 prompts, seed 0, and its
``log_metric/guided/groups_rescued``, summed over the steps, must be above 0 (measured: kepo 5 of 9 triggered
groups, rgpo 8 of 9; with no hinted rows, 0 of 5 and 0 of 7). Smaller models read hints too slowly for this:
hidden 64 with 600 warm-start steps answered 10 % of hinted prompts right, and kepo's tries need both samples right.
"""
import pytest

from polo.train.config import load_recipe
from polo.train.trainer import Trainer
from tests.conftest import recipe_extras

RESCUED = "log_metric/guided/groups_rescued"


@pytest.mark.parametrize("name", ["kepo", "rgpo"])
def test_hinted_warm_start_lets_the_guided_engine_rescue_groups(name, tiny, tmp_path):
    shipped = [o for o in tiny if not o.startswith(("model.tiny.", "warm_start."))]  # the built-in model as shipped
    overrides = [*shipped, *recipe_extras(name), "rollout.prompts_per_step=8", "seed=0"]
    rows = [r for r in Trainer(load_recipe(name, overrides), tmp_path, log=lambda *_: None).run() if r["step"] > 0]
    assert len(rows) == 3
    saved = sum(r.get(RESCUED, 0.0) for r in rows)
    triggered = sum(r.get("log_metric/guided/groups_triggered", 0.0) for r in rows)
    assert triggered > 0 and saved > 0, f"{name}: rescued {saved} of {triggered} triggered groups"
