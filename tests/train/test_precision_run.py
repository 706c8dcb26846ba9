"""Runs with the real-model settings: bfloat16, gradient checkpointing and a token budget train, checkpoint
float32 weights and resume; a cuda device on a machine without one is refused before anything trains."""
import math

import pytest
import torch
from safetensors.torch import load_file

from polo.core.registry import ConfigError
from polo.policy.prefix import drops_cache
from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume


def test_bf16_checkpointed_run_saves_float32_weights_and_resumes(tmp_path, tiny):
    """PPO (policy and critic), both in bfloat16 with checkpointing, micro-batches of at most 256 tokens."""
    recipe = load_recipe("ppo", [*tiny, "model.dtype=bfloat16", "train.gradient_checkpointing=true",
                                 "train.micro_batch_tokens=256", "train.steps=1", "train.save_every=1",
                                 "train.eval_every=1"])
    trainer = Trainer(recipe, tmp_path / "run", log=lambda message: None)
    critic = trainer.models["critic"]
    assert trainer.policy.compute_dtype == critic.compute_dtype == torch.bfloat16
    assert drops_cache(trainer.policy.model.train()) and drops_cache(critic.trunk.train())  # checkpointing on
    assert trainer.updater.settings.micro_batch_tokens == 256
    rows = trainer.run()
    assert math.isfinite(rows[-1]["loss/policy"]) and rows[-1]["optim/skipped_nonfinite"] == 0
    checkpoint = latest_checkpoint(tmp_path / "run")
    for name in ("policy", "critic"):
        weights = load_file(str(checkpoint / f"{name}.safetensors"))
        assert weights and all(w.dtype == torch.float32 for w in weights.values() if w.is_floating_point())
    resumed = resume(tmp_path / "run", log=lambda message: None, overrides=["train.steps=2"])
    assert resumed.policy.compute_dtype == torch.bfloat16
    assert resumed.run()[-1]["step"] == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without cuda")
def test_cuda_on_a_cpu_machine_is_refused_before_the_warm_start(tmp_path, tiny, monkeypatch):
    monkeypatch.setattr("polo.train.trainer.ensure_warm_start", lambda *args: pytest.fail("warm start reached"))
    recipe = load_recipe("grpo", [*tiny, "model.device=cuda"])
    with pytest.raises(ConfigError, match=r"model.device='cuda', but torch.cuda.is_available\(\) is false"):
        Trainer(recipe, tmp_path / "run", log=lambda message: None)
    with pytest.raises(ConfigError, match="model.device: expected cpu, cuda or cuda:N"):
        load_recipe("grpo", [*tiny, "model.device=gpu"])
