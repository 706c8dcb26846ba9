"""The ``diffusion`` engine and the ``gdpo_diffusion`` recipe: rollouts of a masked diffusion LM, a tiny run, resume."""
import math

import pytest
import torch

from polo.core.registry import ConfigError
from polo.policy.diffusion import DiffusionPolicy
from polo.policy.reference import frozen_copy
from polo.policy.policy import build_tiny_policy
from polo.engines.base import ENGINES, EngineSetup
from polo.tasks import build_task
from polo.tasks.rewards import RewardSpec
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume

def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


SMALL = ["rollout.samples_per_prompt=4", "optim.schedule=constant", "warm_start.steps=20", "train.save_every=2", "train.eval_every=2"]


def engine(task, models=None, **settings):
    built = ENGINES.build({"name": "diffusion", **settings})
    built.setup(EngineSetup(task, [RewardSpec("correct", 1.0)], 4, 4, models=models or {}))
    return built


@pytest.fixture(scope="module")
def task():
    return build_task({"name": "addition"})


def test_rollout_rows_and_settings(task):
    torch.manual_seed(0)
    policy = DiffusionPolicy.build_tiny(load_recipe("gdpo_diffusion").model).eval()
    reference = frozen_copy(policy)
    eng = engine(task, {"reference": reference}, steps=2, quadrature="gauss-3", mc_samples=2)
    assert reference.elbo.quadrature == "gauss-3" and reference.elbo.mc_samples == 2  # configured at setup
    examples = task.examples("train", 3, seed=0)
    got = eng.rollout(policy, examples, [0, 1, 2], torch.Generator().manual_seed(0))
    b = got.batch
    assert policy.elbo.quadrature == "gauss-3" and policy.elbo.mc_samples == 2
    assert b.response_ids.shape == (12, 4) and torch.equal(b.group, torch.arange(3).repeat_interleave(4))
    again = policy.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"]
    torch.testing.assert_close(again, b.old_logp)  # old_logp: the rows' ELBO contributions, same masks
    ref = reference.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"]
    assert torch.equal(ref, again)  # the reference's ELBO: same rule, same masks (KL 0 before any update)
    assert (b.old_logp[b.response_mask == 0] == 0).all()
    assert 0.0 <= eng.evaluate(policy, examples) <= 1.0


def test_kind_mismatch_and_bad_settings(task):
    with pytest.raises(ConfigError, match="model.kind=diffusion"):
        engine(task).rollout(build_tiny_policy(), task.examples("train", 1, seed=0), [0], torch.Generator())
    with pytest.raises(ConfigError, match="model.kind='causal'"):
        load_recipe("gdpo_diffusion", ["model.kind=causal"])
    with pytest.raises(ConfigError, match="model.kind='diffusion'"):
        load_recipe("grpo", ["model.kind=diffusion"])
    with pytest.raises(ValueError, match="quadrature='gauss-9'"):
        ENGINES.build({"name": "diffusion", "quadrature": "gauss-9"})
    with pytest.raises(ValueError, match="steps"):
        ENGINES.build({"name": "diffusion", "steps": 0})


def test_recipe_trains_and_resumes_bit_for_bit(tiny, tmp_path):
    full = Trainer(load_recipe("gdpo_diffusion", [*tiny, *SMALL, "train.steps=4"]), tmp_path / "full",
                   log=lambda *_: None).run()
    assert [r["step"] for r in full] == [0, 1, 2, 3, 4]
    assert all(math.isfinite(r["policy/elbo_mean"]) for r in full[1:] if "policy/elbo_mean" in r)
    assert "eval/greedy_accuracy" in full[-1]
    Trainer(load_recipe("gdpo_diffusion", [*tiny, *SMALL, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    resumed = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=4"])
    resumed.run()
    assert _deterministic(full) == _deterministic(resumed.metrics.read())
