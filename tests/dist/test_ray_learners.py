"""Data-parallel learners launched as Ray actors (dist.learners: N): rank 0 writes the run, a resume continues it."""
import pytest

pytest.importorskip("ray")
# once per CI run, in the slow pass (multi-process Ray runs): the torch thread count does not change them
pytestmark = [pytest.mark.scale_out, pytest.mark.slow]

from conftest import TINY  # noqa: E402
from polo.core.registry import ConfigError  # noqa: E402
from polo.train.checkpoint import latest_checkpoint  # noqa: E402
from polo.train.config import load_recipe, load_run_config  # noqa: E402
from polo.train.metrics import read_metrics  # noqa: E402
from polo.train.ray_learners import train_on_ray  # noqa: E402


def test_two_learners_on_ray_train_write_one_run_and_resume(tmp_path):
    run = tmp_path / "run"
    recipe = load_recipe("grpo", [*TINY, "dist.learners=2", "train.steps=2", "train.save_every=2",
                                  "train.eval_every=2"])
    rows = train_on_ray(recipe, run)
    assert [r["step"] for r in rows] == [0, 1, 2] and read_metrics(run / "metrics.jsonl") == rows
    assert latest_checkpoint(run).name == "step_000002"
    resumed = train_on_ray(load_run_config(run, ["train.steps=3"]), run, resume_overrides=["train.steps=3"])
    assert [r["step"] for r in resumed] == [0, 1, 2, 3] and resumed[:3] == rows
    assert latest_checkpoint(run).name == "step_000003"


def test_ray_learners_with_ray_rollout_workers_are_refused():
    with pytest.raises(ConfigError, match="dist.learners=2"):
        load_recipe("grpo", ["dist.learners=2", "dist.backend=ray"])
