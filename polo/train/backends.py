"""Logging backends (``train.report_to``): every row written to ``metrics.jsonl`` also goes to a CSV file,
TensorBoard or Weights & Biases. tensorboard and wandb are optional packages, imported only when asked for."""
from __future__ import annotations

import csv
import importlib
import io
import os
import uuid
from pathlib import Path
from typing import Any

from polo.core.registry import ConfigError
from polo.train.callbacks import Callback, kept_step
from polo.train.files import write_text_atomic


def _require(package: str):
    """Import ``package``, or a one-line ConfigError naming the pip install."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise ConfigError(f"train.report_to includes {package!r}, which needs the {package} package: "
                          f"pip install {package} (or pip install 'polo[{package}]')") from None


def _scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of a row (no step, no booleans, no missing values)."""
    return {k: v for k, v in row.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class CsvLog(Callback):
    """``RUN/metrics.csv``, a view of ``metrics.jsonl``: columns in the order keys first appear, empty cells
    where a row lacks a key. A row with a new key rewrites the file from ``metrics.jsonl`` with the grown
    header (rare: the first training step and keys that appear later, like an eval metric); so does the start
    of a run, which keeps only the rows up to the checkpoint a resume starts from."""

    def on_train_begin(self, trainer) -> None:
        self.path = trainer.run_dir / "metrics.csv"
        step = kept_step(trainer)
        self.rewrite([r for r in trainer.metrics.read() if r["step"] <= step] if step >= 0 else [])

    def rewrite(self, rows: list[dict[str, Any]]) -> None:
        self.columns = list(dict.fromkeys(k for row in rows for k in row))
        text = io.StringIO()
        writer = csv.DictWriter(text, self.columns)
        writer.writeheader()
        writer.writerows(rows)
        write_text_atomic(self.path, text.getvalue())

    def on_log(self, trainer, row) -> None:
        if not set(row) <= set(self.columns):
            self.rewrite(trainer.metrics.read())
            return
        with open(self.path, "a", newline="") as fh:
            csv.DictWriter(fh, self.columns).writerow(row)


class TensorBoardLog(Callback):
    """``RUN/tensorboard/``: one scalar per metric at its step. A resumed run opens a new event file that
    purges the events after its checkpoint (``SummaryWriter(purge_step=...)``)."""

    def __init__(self):
        _require("tensorboard")

    def on_train_begin(self, trainer) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(trainer.run_dir / "tensorboard"), purge_step=kept_step(trainer) + 1)

    def on_log(self, trainer, row) -> None:
        for key, value in _scalars(row).items():
            self.writer.add_scalar(key, value, global_step=row["step"])

    def on_save(self, trainer, checkpoint: Path) -> None:
        self.writer.flush()

    def on_train_end(self, trainer, rows) -> None:
        self.writer.close()


class WandbLog(Callback):
    """Weights & Biases, in ``RUN/wandb/``; offline unless ``WANDB_MODE`` says otherwise (``wandb sync
    RUN/wandb/offline-run-*`` uploads later). A resumed run continues the same wandb run (its id is kept in
    ``RUN/wandb/polo_run_id``)."""

    def __init__(self):
        self.wandb = _require("wandb")

    def on_train_begin(self, trainer) -> None:
        folder = trainer.run_dir / "wandb"
        folder.mkdir(exist_ok=True)
        id_file = folder / "polo_run_id"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:8])
        self.run = self.wandb.init(project="polo", name=trainer.run_dir.name, id=id_file.read_text().strip(),
                                   resume="allow", dir=str(trainer.run_dir), config=trainer.config_tree,
                                   mode=os.environ.get("WANDB_MODE", "offline"),
                                   settings=self.wandb.Settings(console="off", silent=True))

    def on_log(self, trainer, row) -> None:
        self.run.log(_scalars(row), step=row["step"])

    def on_train_end(self, trainer, rows) -> None:
        self.run.finish()


BACKENDS = {"jsonl": None, "csv": CsvLog, "tensorboard": TensorBoardLog, "wandb": WandbLog}
"""``train.report_to`` names → their callback (``jsonl``: ``metrics.jsonl``, which the trainer always writes)."""


def check_backends(names: list[str]) -> list[str]:
    """``names`` if each is a backend, else a ValueError naming the bad one and the valid ones."""
    for name in names:
        if name not in BACKENDS:
            raise ValueError(f"unknown logging backend {name!r}; expected any of {', '.join(BACKENDS)}")
    return names


def backend_callbacks(names: list[str]) -> list[Callback]:
    """One callback per backend named (each once; a missing optional package is a ConfigError)."""
    return [BACKENDS[name]() for name in dict.fromkeys(names) if BACKENDS[name] is not None]
