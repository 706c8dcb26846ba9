"""Runs every (entry, seed) of an arena as ``polo train`` subprocesses, resumably.

Layout of the output folder::

    OUT/runs/<label>_s<seed>/   one polo run folder each; ``DONE`` marks a run that exited 0
    OUT/logs/<label>_s<seed>.log, OUT/logs/sft_<key>.log

A run with ``DONE`` is skipped (its files are not touched); a run without ``DONE`` but with a checkpoint
is continued with ``polo train --resume``; any other run starts from scratch. Before training, each
distinct warm start that is not cached yet is made once with ``polo sft`` (so concurrent workers never
warm-start the same model side by side).
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


from polo.arena.pool import Job, run_jobs
from polo.arena.spec import Arena, RunSpec
from polo.core.registry import ConfigError
from polo.train.checkpoint import latest_checkpoint
from polo.arena.configs import run_tree
from polo.train.config import config_changes
from polo.train.files import write_text_atomic
from polo.train.yaml_files import read_yaml_mapping
from polo.train.metrics import read_metrics
from polo.train.warm_start import cache_root, verify_entry, warm_start_key

DONE = "DONE"


def run_dir(out: Path, run: RunSpec) -> Path:
    return Path(out) / "runs" / run.name


def is_done(path: Path) -> bool:
    return (Path(path) / DONE).is_file()


def mark_done(path: Path) -> None:
    """Write ``DONE`` atomically (temporary file, then rename) with the run's last step."""
    path = Path(path)
    rows = read_metrics(path)
    info = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "last_step": rows[-1]["step"] if rows else None}
    write_text_atomic(path / DONE, json.dumps(info) + "\n")


def check_same_config(run: RunSpec, path: Path) -> None:
    """Refuse to skip or resume a run folder that was made with a different configuration (every setting of
    the resolved recipe is compared, so a folder from a polo with other settings is refused too)."""
    config = path / "config.yaml"
    if not config.is_file():
        return
    changes = config_changes(read_yaml_mapping(config, "a run's config"), run_tree(run.load()), allowed=())
    if changes:
        raise ConfigError(f"{path} was trained with another configuration ({'; '.join(changes[:5])}); "
                          f"use another --out folder or delete that run folder")


@dataclass
class Plan:
    """What an arena invocation will do with each run."""

    skip: list[RunSpec] = field(default_factory=list)
    resume: list[RunSpec] = field(default_factory=list)
    fresh: list[RunSpec] = field(default_factory=list)


def plan_runs(arena: Arena, out: Path) -> Plan:
    plan = Plan()
    for run in arena.runs:
        path = run_dir(out, run)
        check_same_config(run, path)
        if is_done(path):
            plan.skip.append(run)
        elif latest_checkpoint(path) is not None:
            plan.resume.append(run)
        else:
            plan.fresh.append(run)
    return plan


def polo_argv(plugins: list[str], *args: str) -> list[str]:
    return [sys.executable, "-m", "polo.cli", *[f"--plugin={p}" for p in plugins], *args]


def warm_start_jobs(runs: list[RunSpec], out: Path, plugins: list[str]) -> list[Job]:
    """One ``polo sft`` per distinct, not yet cached warm start of the built-in model."""
    jobs: dict[str, Job] = {}
    for run in runs:
        if run.control:  # control policies have no warm start
            continue
        recipe = run.load()
        if recipe.model.path:
            continue
        key = warm_start_key(recipe)
        if key in jobs or verify_entry(cache_root() / "warm_start" / key) is None:
            continue
        jobs[key] = Job(f"sft_{key} (seed {run.seed})", polo_argv(plugins, "sft", run.recipe, *run.overrides),
                        Path(out) / "logs" / f"sft_{key}.log")
    return list(jobs.values())


def train_job(run: RunSpec, out: Path, plugins: list[str], resume: bool) -> Job:
    path = run_dir(out, run)
    args = ["train", "--resume", str(path)] if resume else ["train", run.recipe, *run.overrides, f"--run-dir={path}"]
    return Job(run.name, polo_argv(plugins, *args), Path(out) / "logs" / f"{run.name}.log",
               on_success=lambda: mark_done(path))


def child_env() -> dict[str, str]:
    """The parent's environment with the warm-start cache made explicit and one thread per child."""
    env = dict(os.environ)
    env["POLO_CACHE"] = str(cache_root())
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    return env


def run_arena(arena: Arena, out: Path, workers: int, plugins: list[str] = (), log=print) -> dict[str, int]:
    """Train every run of the arena that is not done yet; return the exit status of each run started."""
    out = Path(out)
    plan = plan_runs(arena, out)
    log(f"arena {arena.file.name}: {len(arena.runs)} runs, {len(plan.skip)} done, {len(plan.resume)} to resume, "
        f"{len(plan.fresh)} to start; {workers} worker(s); output {out}")
    env = child_env()
    sft = warm_start_jobs(plan.resume + plan.fresh, out, list(plugins))
    if sft:
        log(f"warm starts: {len(sft)} to make first")
        failed = {k: v for k, v in run_jobs(sft, workers, env, log).items() if v != 0}
        if failed:
            raise RuntimeError(f"warm start failed: {', '.join(failed)}; see {out / 'logs'}")
    jobs = [train_job(r, out, list(plugins), resume=True) for r in plan.resume]
    jobs += [train_job(r, out, list(plugins), resume=False) for r in plan.fresh]
    return run_jobs(jobs, workers, env, log)
