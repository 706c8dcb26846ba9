"""A run with an EMA teacher (SRPO) resumed from its checkpoint ends where an uninterrupted run ends: the
teacher's weights are checkpointed (``role.teacher.safetensors``), the frozen teachers are not."""
from safetensors.torch import load_file

from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.metrics import read_metrics
from polo.train.trainer import Trainer, resume


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_ema_teacher_resumes_exactly(tmp_path, tiny):
    settings = [*tiny, "train.steps=4", "train.save_every=2", "train.eval_every=2"]
    Trainer(load_recipe("srpo", settings), tmp_path / "full", log=lambda *_: None).run()
    Trainer(load_recipe("srpo", [*settings, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=4"]).run()
    full, cut = latest_checkpoint(tmp_path / "full"), latest_checkpoint(tmp_path / "cut")
    for name in ("policy.safetensors", "role.teacher.safetensors"):
        a, b = load_file(str(full / name)), load_file(str(cut / name))
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a), name
    policy = load_file(str(full / "policy.safetensors"))
    teacher = load_file(str(full / "role.teacher.safetensors"))
    assert any(not (policy[k] == teacher[k]).all() for k in policy)  # the teacher lags the policy (rate 0.05)
    assert deterministic(read_metrics(tmp_path / "full")) == deterministic(read_metrics(tmp_path / "cut"))


def test_frozen_teacher_is_not_checkpointed(tmp_path, tiny):
    Trainer(load_recipe("verpo_evidence", [*tiny, "train.steps=1"]), tmp_path, log=lambda *_: None).run()
    assert not (latest_checkpoint(tmp_path) / "role.teacher.safetensors").exists()
