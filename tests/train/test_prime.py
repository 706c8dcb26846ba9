"""The prime recipe end to end: the implicit PRM trains beside the policy, is checkpointed, and a resumed run
ends exactly where an unbroken one does."""
import math

import torch
from safetensors.torch import load_file

from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume


def quiet(*_):
    pass


def test_two_steps_train_the_prm_beside_the_policy(tiny, tmp_path):
    trainer = Trainer(load_recipe("prime", [*tiny, "train.steps=2"]), tmp_path, log=quiet)
    prm = trainer.models["implicit_prm"]
    initial = {k: v.clone() for k, v in prm.state_dict().items()}
    assert set(trainer.roles) == {"implicit_prm", "reference"} and trainer.critics
    rows = trainer.run()
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows[1:]:
        for key in ("loss/implicit_prm", "implicit_prm/accuracy", "implicit_prm/reward", "prime/process_scale",
                    "prime/process_reward", "loss/policy"):
            assert math.isfinite(row[key]), (key, row)
    # step 1: π_φ is the reference, so every implicit reward is 0 (up to kernel round-off) and the loss log 2
    assert abs(rows[1]["implicit_prm/reward"]) < 1e-5 and abs(rows[1]["loss/implicit_prm"] - math.log(2)) < 1e-5
    assert abs(rows[2]["implicit_prm/reward"]) > 1e-4  # after one update the PRM scores the batch
    assert any(not torch.equal(v, initial[k]) for k, v in prm.state_dict().items())
    saved = load_file(str(latest_checkpoint(tmp_path) / "implicit_prm.safetensors"))
    assert saved.keys() == prm.state_dict().keys()
    assert all(torch.equal(saved[k], v) for k, v in prm.state_dict().items())


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_a_resumed_run_equals_an_unbroken_one(tiny, tmp_path):
    every = ["train.save_every=2", "train.eval_every=2"]
    full = Trainer(load_recipe("prime", [*tiny, *every, "train.steps=4"]), tmp_path / "full", log=quiet).run()
    Trainer(load_recipe("prime", [*tiny, *every, "train.steps=2"]), tmp_path / "cut", log=quiet).run()
    resumed = resume(tmp_path / "cut", log=quiet, overrides=["train.steps=4"])
    resumed.run()
    assert _deterministic(full) == _deterministic(resumed.metrics.read())
    for name in ("policy", "implicit_prm"):
        a = load_file(str(latest_checkpoint(tmp_path / "full") / f"{name}.safetensors"))
        b = load_file(str(latest_checkpoint(tmp_path / "cut") / f"{name}.safetensors"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
