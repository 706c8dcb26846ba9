"""``metrics.jsonl``: one JSON line per training step, truncated to the checkpoint on resume.

A run killed while appending can leave a partial last line: readers skip it, and a resume drops it with the
lines after the checkpoint. A line that does not parse anywhere else means the file was damaged, and is an
error naming the line.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from polo.train.files import write_text_atomic

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
        """Drop lines of steps > ``step`` (written after the checkpoint a resume starts from) and a partial
        last line; the file is replaced atomically."""
        if not self.path.exists():
            return
        kept = [json.dumps(row) for row in read_metrics(self.path) if row["step"] <= step]
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, row: dict[str, Any]) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({k: _plain(v) for k, v in row.items()}) + "\n")

    def read(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)


class MetricsError(ValueError):
    """A metrics line other than the last does not parse: the file was damaged."""


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` (or of the run folder ``path``), without a partial last line."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # no newline after it: a write cut short by a kill
                break
            raise MetricsError(f"{path}:{number}: damaged metrics line (not JSON)") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise MetricsError(f"{path}:{number}: damaged metrics line (not an object with an integer step)")
        rows.append(row)
    return rows
