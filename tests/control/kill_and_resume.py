"""The kill-and-resume check of control runs: train a run to the end, copy its folder, delete the copy's
checkpoints after one step (as if the process had died right after writing that one), resume the copy, and
compare metrics rows without the timing keys."""
import json
import shutil
from pathlib import Path

from polo.train.checkpoint import checkpoint_steps
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer, resume_control

TIMING = ("time/", "perf/", "elapsed_s")
"""Metric keys that measure the machine, not the run: they differ between two runs of the same seed."""


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def killed_after(recipe: str, overrides: list[str], tmp_path: Path, step: int):
    """``(trainer, whole, killed)``: ``recipe`` with ``overrides`` trained whole in ``tmp_path/whole``, its copy in
    ``tmp_path/killed`` without the checkpoints after ``step``, and the trainer resumed there (not yet run; its
    iteration checked to be ``step``)."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    ControlTrainer(load_control_recipe(recipe, overrides), whole, log=lambda m: None).run()
    shutil.copytree(whole, killed)
    for at, path in checkpoint_steps(killed).items():
        if at > step:
            shutil.rmtree(path)
    trainer = resume_control(killed, log=lambda m: None)
    assert trainer.iteration == step
    return trainer, whole, killed


def assert_same_rows(killed: Path, whole: Path) -> None:
    assert without_timing(metrics_rows(killed)) == without_timing(metrics_rows(whole))
