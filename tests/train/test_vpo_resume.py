"""VPO draws its scalarization weights from its own generator, which is checkpointed: a resumed run draws the
same weights as an uninterrupted one."""
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_resumed_vpo_run_matches_uninterrupted(tiny, tmp_path):
    overrides = [*tiny, "train.save_every=1", "train.eval_every=100", "optim.schedule=constant"]  # no horizon
    full = Trainer(load_recipe("vpo", overrides), tmp_path / "full", log=lambda *_: None).run()
    first = Trainer(load_recipe("vpo", [*overrides, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    rest = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=3"]).run()
    assert [r["step"] for r in first] == [0, 1, 2] and rest[-1]["step"] == 3
    assert "vpo/pool_best" in rest[-1]
    assert _deterministic(full[-1:]) == _deterministic(rest[-1:])
