"""What a reward function receives besides the batch, as TRL's ``GRPOTrainer`` passes it, and how ``async def``
rewards are awaited.

``trainer_state`` is a ``TrainerState`` (``global_step``: optimizer steps completed when the batch was generated,
``max_steps``: the run's ``train.steps``); ``log_metric(name, value)`` records a scalar that the trainer averages
over the step and writes into that step's metrics row as ``log_metric/<name>``. Both live in a ``RewardContext``,
one per run. Async rewards of a batch run concurrently on one background event loop, so they are awaited the same
way whether or not the caller is itself inside a running loop (a Jupyter notebook).
"""
from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainerState:
    """The fields of TRL's ``TrainerState`` that a reward reads to shape itself by training progress."""

    global_step: int = 0
    max_steps: int = 0


@dataclass
class RewardContext:
    """A run's state shared with its rewards: ``state``, the values logged since the trainer last took them, and
    whether the "every reward returned None" warning was shown (once per run)."""

    state: TrainerState = field(default_factory=TrainerState)
    logged: dict[str, list[float]] = field(default_factory=dict)
    warned_unscored: bool = False

    def log_metric(self, name: str, value: float) -> None:
        """Record ``value`` under ``name`` (TRL's ``log_metric``)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"log_metric: the name must be a non-empty string, got {name!r}")
        try:
            self.logged.setdefault(name, []).append(float(value))
        except (TypeError, ValueError):
            raise ValueError(f"log_metric({name!r}, ...): expected a number, got {value!r:.100}") from None

    def log_all(self, logged: dict[str, list[float]]) -> None:
        """Record every value of ``logged`` (another context's ``logged``: a Ray worker's rewards)."""
        for name, values in logged.items():
            for value in values:
                self.log_metric(name, value)

    def take_metrics(self) -> dict[str, float]:
        """``{"log_metric/<name>": mean}`` of the values logged since the last call, then forgotten."""
        row = {f"log_metric/{name}": sum(values) / len(values) for name, values in self.logged.items()}
        self.logged.clear()
        return row

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments every reward receives from the context."""
        return {"trainer_state": self.state, "log_metric": self.log_metric}


_loop_lock = threading.Lock()
_loop: tuple[int, asyncio.AbstractEventLoop] | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    """The process's reward event loop, running forever in a daemon thread (started anew in a forked child)."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="polo-async-rewards", daemon=True).start()
            _loop = (os.getpid(), loop)
        return _loop[1]


def run_concurrently(coroutines: list[Coroutine]) -> list:
    """The results of ``coroutines``, awaited concurrently (``asyncio.gather``) on the background loop."""

    async def gather() -> list:
        return list(await asyncio.gather(*coroutines))

    return asyncio.run_coroutine_threadsafe(gather(), _background_loop()).result()
