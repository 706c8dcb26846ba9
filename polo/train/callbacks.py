"""Callbacks: code that runs at fixed points of a training run, for logging backends, sample tables, exports
and user hooks (the Python API's ``Trainer(..., callbacks=[...])``).

Order within one step: the step's update → ``on_evaluate`` (on evaluation steps; a returned dict is added to
the row, so a callback contributes custom evaluation metrics) → ``on_step_end`` (may add metrics to the row)
→ the row is written to ``metrics.jsonl`` → ``on_log`` (the row as written) → the checkpoint, if one is due →
``on_save``. Step 0 (before any update) runs ``on_evaluate`` and ``on_log`` only. Every method is optional; an
exception in a callback stops the run like any other error.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from polo.engines.base import Rollouts
    from polo.train.trainer import Trainer


class Callback:
    """Base class: override the hooks you need (each receives the trainer, which exposes ``recipe``,
    ``policy``, ``task``, ``run_dir``, ``step_count`` and ``log``)."""

    def on_train_begin(self, trainer: Trainer) -> None:
        """Once per ``Trainer.run`` (also on resume), after the run folder is locked and config.yaml written."""

    def on_evaluate(self, trainer: Trainer, row: dict[str, Any]) -> dict[str, float] | None:
        """After the held-out evaluation (``row`` holds ``eval/greedy_accuracy``); return extra metrics."""
        return None

    def on_step_end(self, trainer: Trainer, row: dict[str, Any], rollouts: Rollouts) -> None:
        """After each training step, before its row is written; ``rollouts`` are the step's scored samples (texts,
        examples and the batch with rewards and advantages). Add metrics by setting keys of ``row``."""

    def on_log(self, trainer: Trainer, row: dict[str, Any]) -> None:
        """After a row (step 0 included) is appended to ``metrics.jsonl``."""

    def on_save(self, trainer: Trainer, checkpoint: Path) -> None:
        """After a checkpoint is written."""

    def on_train_end(self, trainer: Trainer, rows: list[dict[str, Any]]) -> None:
        """Once, when training reaches ``train.steps`` or its time budget (not when it fails)."""


def kept_step(trainer: Trainer) -> int:
    """The last step whose logged lines a run keeps at ``on_train_begin``: the checkpoint's on resume, none
    (−1) in a new run."""
    return trainer.step_count if trainer.step_count else -1
