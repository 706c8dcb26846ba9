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
    "mnpo": ["policy/mnpo_u", "policy/mnpo_mix_gap", "policy/mnpo_distinct_iterates", "policy/reward_accuracy"],
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
    trainer, _ = run("mnpo", tiny, tmp_path)  # the shipped recipe pushes after every step
    history = trainer.models["history"]
    assert int(history.filled) == 2
    policy = next(trainer.policy.parameters())
    assert torch.equal(next(history.snapshots[0].parameters()), policy)  # the last step's policy
    assert not torch.equal(next(history.snapshots[1].parameters()), policy)
    fresh = Trainer(trainer.recipe, tmp_path, log=lambda *_: None)
    fresh.restore(latest_checkpoint(tmp_path))
    for a, b in zip(fresh.models["history"].state_dict().values(), history.state_dict().values()):
        assert torch.equal(a, b)


def test_shipped_mnpo_plays_two_distinct_past_iterates_within_four_steps(tiny, tmp_path):
    # seed 0: step 1 holds the initial policy twice (the mix is the most recent iterate: INPO's u); from step 2 on
    # the two slots differ and the mix's gap differs from the most recent iterate's (threshold: > 0). 16 prompts a
    # step so that every step has untied pairs (the diagnostic averages over the pairs that count)
    _, rows = run("mnpo", tiny, tmp_path, "train.steps=4", "train.save_every=4", "train.eval_every=4",
                  "rollout.prompts_per_step=16")
    gap = [r["policy/mnpo_mix_gap"] for r in rows[1:]]
    assert [r["policy/mnpo_distinct_iterates"] for r in rows[1:]] == [1.0, 2.0, 2.0, 2.0]
    assert gap[0] == 0.0 and all(g > 0 for g in gap[1:]), gap


def test_oppo_head_and_anchor_are_checkpointed(tiny, tmp_path):
    trainer, _ = run("oppo", tiny, tmp_path)
    loss = trainer.components["policy_loss"]
    fresh = Trainer(trainer.recipe, tmp_path, log=lambda *_: None)
    fresh.restore(latest_checkpoint(tmp_path))
    restored = fresh.components["policy_loss"]
    assert torch.equal(restored._z_star.detach(), loss._z_star.detach())
    assert torch.equal(restored._head.weight, loss._head.weight)
