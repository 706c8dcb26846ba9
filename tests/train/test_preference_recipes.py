"""The preference recipes train 2 steps on the built-in model and report their pair metrics; MNPO's history and
OPPO's head and z* are checkpointed and restored."""
import math

import pytest
import torch

from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.trainer import Trainer

PAIR_METRICS = ["policy/pairs_used", "loss/policy"]
SPECIFIC = {
    "dpo": ["policy/reward_accuracy", "policy/reward_margin", "policy/chosen_log_ratio", "policy/rejected_log_ratio"],
    "ipo": ["policy/reward_accuracy", "policy/reward_margin"],
    "online_dpo": ["policy/reward_accuracy"],
    "mnpo": ["policy/mnpo_u", "policy/reward_accuracy"],
    "inpo": ["policy/mnpo_u"],
    "oppo": ["policy/rec_nll", "policy/pref_loss", "policy/norm_loss", "policy/z_star_norm", "oppo/z_star_norm"],
}


def run(name, tiny, run_dir, *extra):
    recipe = load_recipe(name, [*tiny, "train.steps=2", "train.save_every=2", "train.eval_every=2", "seed=0", *extra])
    trainer = Trainer(recipe, run_dir, log=lambda *_: None)
    return trainer, trainer.run()


@pytest.mark.parametrize("name", sorted(SPECIFIC))
def test_recipe_trains_two_steps_with_pair_metrics(name, tiny, tmp_path):
    _, rows = run(name, tiny, tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        for key in PAIR_METRICS + SPECIFIC[name]:
            assert key in row and math.isfinite(row[key]), (name, key, row.get(key))
    assert "eval/greedy_accuracy" in rows[-1]


def test_offline_pairs_are_all_used(tiny, tmp_path):
    _, rows = run("dpo", tiny, tmp_path)
    assert all(r["policy/pairs_used"] == 1.0 for r in rows[1:])
    assert all(r["train/accuracy"] == 0.5 for r in rows[1:])  # chosen correct, rejected not (packaged pairs)


def test_mnpo_history_is_pushed_and_checkpointed(tiny, tmp_path):
    trainer, _ = run("mnpo", tiny, tmp_path, "roles.history.iteration_steps=1")
    history = trainer.models["history"]
    assert int(history.filled) == 2
    policy = next(trainer.policy.parameters())
    assert torch.equal(next(history.snapshots[0].parameters()), policy)  # the last step's policy
    assert not torch.equal(next(history.snapshots[1].parameters()), policy)
    fresh = Trainer(trainer.recipe, tmp_path, log=lambda *_: None)
    fresh.restore(latest_checkpoint(tmp_path))
    for a, b in zip(fresh.models["history"].state_dict().values(), history.state_dict().values()):
        assert torch.equal(a, b)


def test_oppo_head_and_anchor_are_checkpointed(tiny, tmp_path):
    trainer, _ = run("oppo", tiny, tmp_path)
    loss = trainer.components["policy_loss"]
    fresh = Trainer(trainer.recipe, tmp_path, log=lambda *_: None)
    fresh.restore(latest_checkpoint(tmp_path))
    restored = fresh.components["policy_loss"]
    assert torch.equal(restored._z_star.detach(), loss._z_star.detach())
    assert torch.equal(restored._head.weight, loss._head.weight)
