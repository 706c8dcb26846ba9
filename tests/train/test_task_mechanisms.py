"""Mechanisms that need a task with the right structure act at their recipes' shipped settings.

DRPO's length weights act only on groups whose correct answers differ in length, VPO's scalarizations only on
answer sets whose answers trade the reward components off, GD²PO's drop involves its length component only where
that component fires and disagrees with correctness; MC-GRPO's MAD scale is 0 on most groups of discrete rewards
(its advantages then reach |R − m|/1e-3). On the default task (addition) the first three never act: each recipe
ships the task where it does (its YAML says why). ``DIAGNOSTICS`` names, per recipe, the logged diagnostic that is
0 where the mechanism is idle; the test runs the shipped recipe (task, rewards, hyperparameters) for 3 steps and
asserts its mean over the steps is above 0.

The model is shrunk (``SMALL``: hidden 64, 2 layers, 300 warm-start steps on 2000 problems, 8 prompts a step,
seed 0): under the ``tiny`` fixture's hidden 32, 1 layer and 40 warm-start steps the model answers no
countdown_trace problem, so DRPO has no correct answer to weigh (measured: spread 0 at 40 and 150 steps). Values
seen with seed 0 (torch 2.13, CPU, one thread) are in each entry's comment; each run takes 6-25 s with its warm
start.
"""
import pytest

from polo.train.config import load_recipe
from polo.train.trainer import Trainer

SMALL = ["model.tiny.hidden_size=64", "model.tiny.num_layers=2", "model.tiny.intermediate_size=128",
         "warm_start.steps=300", "warm_start.examples=2000", "rollout.prompts_per_step=8", "seed=0"]

# recipe -> (diagnostic, what it shows)
DIAGNOSTICS = {
    "drpo": ("policy/length_weight_spread",  # 0.022, 0.061, 0.122
             "mean max − min of the length weights q over a group's correct answers: they differ in length"),
    "vpo": ("vpo/scalarization_disagreement",  # 0.092, 0.078, 0.068
            "share of (rollout, draw) pairs whose best answer is not the one the first draw picks"),
    "gd2po": ("gd2po/drop_frac/overlong",  # 0.359, 0.438, 0.375
              "share of rollouts dropped for a sign conflict that the overlong length term takes part in"),
    "mc_grpo": ("mc_grpo/mad_zero_frac",  # 0.875, 0.875, 0.875
                "share of samples whose group has MAD 0, where |A| = |R − median|/1e-3"),
}


@pytest.mark.parametrize("name", sorted(DIAGNOSTICS))
def test_mechanism_acts_on_the_shipped_task(name, tiny, tmp_path):
    key, what = DIAGNOSTICS[name]
    rows = Trainer(load_recipe(name, [*tiny, *SMALL]), tmp_path, log=lambda *_: None).run()
    values = [row[key] for row in rows if row["step"] > 0 and key in row]
    assert len(values) == 3, f"{name}: {key} logged on {len(values)} of 3 steps"
    assert sum(values) / len(values) > 0, f"{name}: {key} = {values}, expected > 0 ({what})"
