"""A pool of N worker processes: runs command lines, at most N at a time, each logging to its own file.

The parent schedules the children from its one thread (no executor threads), which lets every child ask
the kernel to terminate it when the parent dies (Linux ``PR_SET_PDEATHSIG``): killing an arena never
leaves orphaned trainings behind that would race with the next, resumed, arena.
"""
from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

POLL_S = 0.1


@dataclass
class Job:
    name: str
    argv: list[str]
    log_path: Path
    on_success: Callable[[], None] | None = None
    """Called in the parent right after the process exits with status 0."""


_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: terminate me when my parent exits."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _start(job: Job, env: dict[str, str]) -> subprocess.Popen:
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(job.log_path, "a") as log:
        log.write(f"$ {' '.join(job.argv)}\n")
        log.flush()
        return subprocess.Popen(job.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, preexec_fn=_die_with_parent)


def run_jobs(jobs: list[Job], workers: int, env: dict[str, str], log=print) -> dict[str, int]:
    """Run every job with at most ``workers`` alive at once; return each job's exit status by name."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    pending = list(jobs)
    running: dict[str, tuple[Job, subprocess.Popen, float]] = {}
    status: dict[str, int] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                running[job.name] = (job, _start(job, env), time.perf_counter())
                log(f"started {job.name}")
            time.sleep(POLL_S)
            for name, (job, proc, start) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                del running[name]
                status[name] = code
                took = time.perf_counter() - start
                if code == 0:
                    if job.on_success is not None:
                        job.on_success()
                    log(f"finished {name} in {took:.0f} s")
                else:
                    log(f"[red]FAILED[/red] {name} (exit {code}) after {took:.0f} s; log: {job.log_path}")
    finally:
        for _, proc, _ in running.values():
            proc.terminate()
        for _, proc, _ in running.values():
            proc.wait()
    return status
