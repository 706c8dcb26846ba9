"""A real arena of 2 tiny recipes × 2 seeds, killed part-way and run again: finished runs are skipped
untouched, the interrupted ones resume, and the report comes out complete.

One arena serves every test of this module (it is trained once, on first use): grpo runs 2 steps, rloo
16 steps with a checkpoint every 2; with 3 workers the arena can be killed once both grpo runs are done
while rloo_s0 is mid-run. The killed arena is a fork of this process (no second start-up of torch).
"""
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from polo.cli import main
from polo.tasks import build_task
from polo.train.config import load_recipe
from polo.train.metrics import read_metrics
from polo.train.warm_start import ensure_warm_start

from .helpers import write_arena

_ARENA: dict = {}
RLOO_STEPS = 16
SETS_BUDGET = ("train.steps=", "train.eval_every=", "train.save_every=")


def _pids_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a unique temporary path)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            pass
    return [p for p in pids if p != os.getpid()]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(folder.rglob("*")) if p.is_file()}


def _quiet_main(argv: list[str]) -> None:
    """The arena command with its output discarded (runs in the forked child)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    main(argv)


def _kill_then_resume(root: Path, tiny: list[str]) -> dict:
    overrides = [o for o in tiny if not o.startswith(SETS_BUDGET)] + ["train.eval_every=2", "train.save_every=2"]
    path = write_arena(root / "tiny.yaml", budget={"steps": 2}, overrides=overrides, workers=2,
                       entries=[{"recipe": "grpo"},
                                {"recipe": "rloo", "overrides": [f"train.steps={RLOO_STEPS}"]}])
    for seed in (0, 1):  # warm starts in this process: the arena then only trains (unit tests cover its sft jobs)
        recipe = load_recipe("grpo", overrides + [f"seed={seed}"])
        ensure_warm_start(recipe, build_task(recipe.task), log=lambda m: None)
    out = root / "out"
    runs = {name: out / "runs" / name for name in ("grpo_s0", "grpo_s1", "rloo_s0", "rloo_s1")}
    argv = ["arena", str(path), f"--out={out}", "--workers=3"]
    arena = multiprocessing.get_context("fork").Process(target=_quiet_main, args=(argv,))
    arena.start()

    def interrupted() -> list[str]:
        return [n for n, p in runs.items() if n.startswith("rloo") and (p / "checkpoints").is_dir()
                and any((p / "checkpoints").glob("step_*")) and not (p / "DONE").exists()]

    deadline = time.time() + 400
    while not ((runs["grpo_s0"] / "DONE").exists() and (runs["grpo_s1"] / "DONE").exists() and interrupted()):
        assert arena.is_alive(), "the arena ended before it could be killed"
        assert time.time() < deadline, "the arena did not get far enough in time"
        time.sleep(0.05)
    os.kill(arena.pid, signal.SIGKILL)  # the arena only: its trainings must die with it
    arena.join()
    resumed = interrupted()
    deadline = time.time() + 20
    while (orphans := _pids_mentioning(str(out))) and time.time() < deadline:
        time.sleep(0.1)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    before = {n: _snapshot(runs[n]) for n in ("grpo_s0", "grpo_s1")}

    code = main(["arena", str(path), f"--out={out}"])
    return {"out": out, "runs": runs, "code": code, "orphans": orphans, "resumed": resumed, "before": before}


@pytest.fixture
def killed_then_resumed(tmp_path_factory, tiny):
    if not _ARENA:
        _ARENA.update(_kill_then_resume(tmp_path_factory.mktemp("arena"), tiny))
    return _ARENA


def test_end_to_end_report(killed_then_resumed):
    r = killed_then_resumed
    out = r["out"]
    assert r["code"] == 0
    assert all((p / "DONE").exists() for p in r["runs"].values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["missing"] == []
    assert {e["label"]: e["seeds"] for e in summary["entries"]} == {"grpo": [0, 1], "rloo": [0, 1]}
    md = (out / "report.md").read_text()
    assert "## Ranking by final accuracy" in md and "## Results per entry" in md
    assert len(list((out / "figures").glob("*.png"))) == 4
    assert (out / "report.html").read_text().count("src='data:image/png;base64,") == 4


def test_kill_then_rerun_skips_finished_runs_and_resumes_the_others(killed_then_resumed):
    r = killed_then_resumed
    assert r["orphans"] == [], "trainings outlived the killed arena"
    for name, files in r["before"].items():  # finished before the kill: not one file touched
        assert _snapshot(r["runs"][name]) == files, name
    assert r["resumed"], "no run was mid-way when the arena was killed"
    for name in r["resumed"]:
        log = (r["out"] / "logs" / f"{name}.log").read_text()
        assert f"train --resume {r['runs'][name]}" in log
        steps = [row["step"] for row in read_metrics(r["runs"][name])]
        assert steps == list(range(RLOO_STEPS + 1))
