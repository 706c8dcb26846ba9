"""Arena runner pieces without training: the plan (skip / resume / fresh), warm-start jobs, the pool."""
import json
import sys

import pytest
import torch

from polo.arena import load_arena
from polo.arena.pool import Job, run_jobs
from polo.arena.runner import DONE, plan_runs, run_dir, train_job, warm_start_jobs
from polo.core.registry import ConfigError
from polo.train.checkpoint import save_checkpoint
from polo.train.config import dump_recipe
from polo.train.manifest import write_manifest
from polo.train.warm_start import warm_start_key

from .helpers import write_arena


def _arena(tmp_path, **fields):
    return load_arena(write_arena(tmp_path / "a.yaml", **fields))


def test_plan_skips_done_resumes_checkpointed_and_starts_the_rest(tmp_path):
    arena, out = _arena(tmp_path), tmp_path / "out"
    done, ckpt, empty = (run_dir(out, r) for r in arena.runs[:3])
    for path, run in ((done, arena.runs[0]), (ckpt, arena.runs[1])):
        path.mkdir(parents=True)
        (path / "config.yaml").write_text(dump_recipe(run.load()))
    (done / DONE).write_text("{}")
    save_checkpoint(ckpt, 2, {"policy": {"w": torch.zeros(2)}}, {"step": 2})
    empty.mkdir(parents=True)
    plan = plan_runs(arena, out)
    assert [r.name for r in plan.skip] == ["grpo_s0"]
    assert [r.name for r in plan.resume] == ["grpo_s1"]
    assert [r.name for r in plan.fresh] == ["rloo_s0", "rloo_s1"]
    assert train_job(plan.resume[0], out, [], resume=True).argv[-3:] == ["train", "--resume", str(ckpt)]


def test_plan_refuses_a_run_folder_made_with_another_config(tmp_path):
    arena, out = _arena(tmp_path), tmp_path / "out"
    path = run_dir(out, arena.runs[0])
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(dump_recipe(arena.runs[0].load().model_copy(update={"entropy_coef": 0.5})))
    with pytest.raises(ConfigError, match="another configuration .*entropy_coef"):
        plan_runs(arena, out)


def test_one_warm_start_per_distinct_uncached_model(tmp_path, monkeypatch):
    monkeypatch.setenv("POLO_CACHE", str(tmp_path / "cache"))
    arena = _arena(tmp_path, entries=[{"recipe": "grpo"}, {"recipe": "rloo"},
                                      {"label": "big", "recipe": "grpo", "overrides": ["model.tiny.num_layers=3"]}])
    jobs = warm_start_jobs(list(arena.runs), tmp_path / "out", [])
    assert len(jobs) == 4  # seeds 0 and 1 of the default model, seeds 0 and 1 of the 3-layer one
    assert all(j.argv[3] == "sft" for j in jobs)
    cached = tmp_path / "cache" / "warm_start" / warm_start_key(arena.runs[0].load())
    cached.mkdir(parents=True)
    (cached / "config.json").write_text("{}")
    assert len(warm_start_jobs(list(arena.runs), tmp_path / "out", [])) == 4  # no manifest: not a cached entry
    write_manifest(cached)
    assert len(warm_start_jobs(list(arena.runs), tmp_path / "out", [])) == 3


def test_pool_runs_every_job_and_reports_status(tmp_path):
    marks = []
    jobs = [Job(f"j{i}", [sys.executable, "-c", f"import sys; print({i}); sys.exit({i % 2})"], tmp_path / f"{i}.log",
                on_success=lambda i=i: marks.append(i)) for i in range(4)]
    status = run_jobs(jobs, workers=2, env={}, log=lambda m: None)
    assert status == {"j0": 0, "j1": 1, "j2": 0, "j3": 1}
    assert sorted(marks) == [0, 2]
    assert (tmp_path / "2.log").read_text().splitlines()[-1] == "2"


def test_done_marker_records_the_last_step(tmp_path):
    from polo.arena.runner import mark_done

    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 5}\n')
    mark_done(tmp_path)
    assert json.loads((tmp_path / DONE).read_text())["last_step"] == 5
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
