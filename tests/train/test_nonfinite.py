"""Nothing non-finite reaches the weights, and a checkpoint's state never runs code when loaded."""
import math
import os
import pickle

import pytest
import torch
from safetensors.torch import load_file

from polo.cli import main
from polo.core.registry import ConfigError
from polo.tasks import register_reward
from polo.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint
from polo.train.manifest import write_manifest
from polo.train.config import load_recipe
from polo.train.trainer import NonFiniteError, Trainer


@pytest.mark.parametrize("recipe, override", [
    ("grpo", "optim.lr=.inf"), ("grpo", "optim.weight_decay=.inf"), ("grpo", "kl.coef=.inf"),
    ("ppo", "roles.critic.lr=.inf"), ("grpo", "entropy_coef=.nan"), ("grpo", "policy_loss.clip_low=.nan"),
    ("grpo", "rewards=[{name: correct, weight: .nan}]"), ("grpo", "rewards=[{name: correct, weight: .inf}]"),
    ("dapo", "shaping=[{name: overlong, weight: .nan}]"), ("grpo", "advantage.eps=.nan"),
    ("grpo", "model.lora.dropout=.nan"),
])
def test_non_finite_settings_are_refused(recipe, override, tiny):
    with pytest.raises(ConfigError, match="finite|Extra inputs"):
        load_recipe(recipe, [*tiny, override])


@register_reward("test_overflowing_reward")
def overflowing(prompts, completions, **kwargs):
    return [1e308] * len(completions)  # finite in float64, inf in float32


def test_a_reward_that_overflows_float32_is_an_error_naming_it(tiny, tmp_path):
    recipe = load_recipe("grpo", [*tiny, "rewards=[{name: test_overflowing_reward, weight: 1.0}]"])
    with pytest.raises(ValueError, match="test_overflowing_reward.*overflows float32"):
        Trainer(recipe, tmp_path, log=lambda *_: None).run()


def finite_checkpoints(run_dir) -> bool:
    files = list((run_dir / "checkpoints").glob("step_*/*.safetensors"))
    return all(torch.isfinite(t).all() for f in files for t in load_file(str(f)).values() if t.is_floating_point())


@pytest.mark.parametrize("override", ["advantage.eps=0", "optim.lr=1e30"])
def test_non_finite_steps_are_skipped_then_stop_the_run(override, tiny, tmp_path):
    """eps = 0 divides all-equal groups by 0 (NaN advantages); lr = 1e30 sends the weights to ±1e30, whose
    logits overflow at the next step. Either way no optimizer step takes a non-finite gradient, the run stops
    once more than ``max_nonfinite_skips`` were skipped, and every checkpoint holds finite weights."""
    recipe = load_recipe("grpo", [*tiny, override, "train.steps=6", "train.save_every=1",
                                  "train.max_nonfinite_skips=1", "train.skip_zero_advantage_rows=false"])
    trainer = Trainer(recipe, tmp_path, log=lambda *_: None)
    with pytest.raises(NonFiniteError, match="non-finite loss or gradient"):
        trainer.run()
    assert trainer.nonfinite_skips > 1
    assert all(math.isfinite(float(p.detach().abs().max())) for p in trainer.policy.parameters())
    assert finite_checkpoints(tmp_path)


class Exploit:
    """A pickle payload that creates a file when unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_state_pickle_is_refused_without_running_code(tiny, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(load_recipe("grpo", tiny), run_dir, log=lambda *_: None).run()
    ckpt = latest_checkpoint(run_dir)
    load_checkpoint(ckpt)  # polo's own state loads under weights_only
    marker = tmp_path / "pwned"
    with open(ckpt / "trainer_state.pt", "wb") as f:
        pickle.dump({"step": Exploit(marker)}, f)
    write_manifest(ckpt)  # an attacker who forges the manifest too: the checkpoint verifies, its state is refused
    with pytest.raises(CheckpointError, match="objects other than tensors and plain data"):
        load_checkpoint(ckpt)
    assert main(["train", "--resume", str(run_dir)]) == 1  # one line naming the file, no traceback
    assert main(["eval", str(run_dir), "--size", "4"]) == 0  # evaluation reads the safetensors only
    assert not marker.exists()


def test_replayed_batches_survive_a_resume(tiny, tmp_path):
    """R²VPO keeps past batches in its state; they are stored as plain tensors and rebuilt on resume."""
    recipe = load_recipe("r2vpo", tiny)
    first = Trainer(recipe, tmp_path, log=lambda *_: None)
    first.run()
    second = Trainer(recipe, tmp_path, log=lambda *_: None)
    second.restore(latest_checkpoint(tmp_path))
    assert len(second.replay) == len(first.replay) > 0
    for a, b in zip(first.replay, second.replay):
        assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.advantages, b.advantages)
