"""A damaged newest checkpoint is skipped with a warning, an older good one is used, and temporaries go."""
import os

import pytest
import torch
from safetensors.torch import load_file

from polo.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint, verify_checkpoint
from polo.train.manifest import MANIFEST
from polo.train.config import load_recipe
from polo.train.metrics import read_metrics
from polo.train.trainer import Trainer, resume


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished tiny run (checkpoints at steps 2 and 3 after pruning), copied per test."""
    from conftest import TINY  # the tiny fixture is function-scoped; this one is shared by the module

    run_dir = tmp_path_factory.mktemp("finished") / "run"
    Trainer(load_recipe("grpo", list(TINY) + ["train.save_every=1"]), run_dir, log=_quiet).run()
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path):
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(finished, dst)
    return dst


def _ckpt(run_dir, step):
    return run_dir / "checkpoints" / f"step_{step:06d}"


def test_a_fresh_run_verifies(run_dir):
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["step_000002", "step_000003"]
    for name in names:
        assert verify_checkpoint(run_dir / "checkpoints" / name) is None
        assert (run_dir / "checkpoints" / name / MANIFEST).is_file()
    messages = []
    assert latest_checkpoint(run_dir, log=messages.append) == _ckpt(run_dir, 3) and messages == []


def _falls_back(run_dir, damaged_file):
    messages = []
    assert latest_checkpoint(run_dir, log=messages.append) == _ckpt(run_dir, 2)
    assert len(messages) == 1 and "step_000003" in messages[0] and damaged_file in messages[0]
    with pytest.warns(UserWarning, match="step_000003"):  # default: warnings.warn
        assert latest_checkpoint(run_dir) == _ckpt(run_dir, 2)


def test_truncated_policy_falls_back(run_dir):
    f = _ckpt(run_dir, 3) / "policy.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    _falls_back(run_dir, "policy.safetensors")
    with pytest.raises(CheckpointError, match="policy.safetensors"):
        load_checkpoint(_ckpt(run_dir, 3))


def test_deleted_state_falls_back(run_dir):
    (_ckpt(run_dir, 3) / "trainer_state.pt").unlink()
    _falls_back(run_dir, "trainer_state.pt")
    with pytest.raises(CheckpointError, match="trainer_state.pt"):
        load_checkpoint(_ckpt(run_dir, 3))


def test_garbage_state_falls_back(run_dir):
    f = _ckpt(run_dir, 3) / "trainer_state.pt"
    f.write_bytes(os.urandom(f.stat().st_size))  # same size: only the hash tells
    _falls_back(run_dir, "trainer_state.pt")
    with pytest.raises(CheckpointError, match="trainer_state.pt"):
        load_checkpoint(_ckpt(run_dir, 3))


def test_missing_or_bad_manifest_is_unverifiable(run_dir):
    (_ckpt(run_dir, 3) / MANIFEST).unlink()  # as written by an older polo
    _falls_back(run_dir, MANIFEST)
    (_ckpt(run_dir, 2) / MANIFEST).write_text("{not json")
    assert MANIFEST in verify_checkpoint(_ckpt(run_dir, 2))


def test_all_bad_gives_none(run_dir):
    for step in (2, 3):
        f = _ckpt(run_dir, step) / "policy.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    messages = []
    assert latest_checkpoint(run_dir, log=messages.append) is None
    assert len(messages) == 2


def test_leftover_temporaries_are_removed_by_the_next_save(run_dir):
    root = run_dir / "checkpoints"
    for name in (".tmp_step_000004_1", ".tmp_step_000009_999999"):
        (root / name).mkdir()
        (root / name / "policy.safetensors").write_bytes(b"half")
    path = save_checkpoint(run_dir, 7, {"policy": {"w": torch.ones(3)}}, {"step": 7})
    assert not list(root.glob(".tmp_step_*"))
    assert verify_checkpoint(path) is None
    assert torch.equal(load_file(str(path / "policy.safetensors"))["w"], torch.ones(3))


def test_resume_after_corrupting_the_newest_continues_from_the_older(tiny, tmp_path):
    run_dir = tmp_path / "run"
    Trainer(load_recipe("grpo", tiny + ["train.save_every=1"]), run_dir, log=_quiet).run()  # ckpts 2, 3 kept
    before = _state_policy(run_dir, 3)
    f = _ckpt(run_dir, 3) / "policy.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.warns(UserWarning, match="step_000003"):
        resumed = resume(run_dir, log=_quiet)
    assert resumed.step_count == 2
    resumed.run()
    assert resumed.step_count == 3
    assert latest_checkpoint(run_dir) == _ckpt(run_dir, 3)
    assert verify_checkpoint(_ckpt(run_dir, 3)) is None  # rewritten by the resumed run
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]
    after = _state_policy(run_dir, 3)
    assert all(torch.equal(before[k], after[k]) for k in before)  # the same step 3 as the first time


def _state_policy(run_dir, step):
    # cloned: safetensors may map the file, which the test then rewrites in place
    return {k: v.clone() for k, v in load_file(str(_ckpt(run_dir, step) / "policy.safetensors")).items()}
