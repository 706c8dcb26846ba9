"""``metrics.jsonl``: one JSON line per training step, truncated to the checkpoint on resume."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

TIMING_PREFIXES = ("time/", "perf/")
"""Metrics that measure wall-clock and so differ between otherwise identical runs."""


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps > ``step`` (written after the checkpoint a resume starts from)."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({k: _plain(v) for k, v in row.items()}) + "\n")

    def read(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line]
