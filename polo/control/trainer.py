"""The run around a control method: run folder, config.yaml, metrics.jsonl, atomic checkpoints every
``checkpoint_every`` iterations, ``--resume`` bit for bit, evaluation every ``eval_every``, curves.png."""
from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from polo.control.recipe import (EXTENDABLE, ControlRecipe, default_control_run_dir, dump_tree,
                                       load_control_recipe, load_control_run_config)
from polo.core.registry import ConfigError
from polo.train.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from polo.train.config import config_changes
from polo.train.files import write_text_atomic
from polo.train.lock import RunLock
from polo.train.metrics import MetricsLog
from polo.train.plots import plot_run


def numpy_rng_state() -> list:
    """numpy's global generator state in the plain types a weights-only checkpoint load accepts."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]


def set_numpy_rng_state(state: list) -> None:
    name, keys, pos, has_gauss, cached = state
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


class ControlTrainer:
    """One run of a control recipe in ``run_dir`` (default ``output_dir/NAME_sSEED_TIME``)."""

    def __init__(self, recipe: ControlRecipe, run_dir: Path | str | None = None, log: Callable[[str], Any] = print):
        self.recipe, self.log = recipe, log
        self.run_dir = Path(run_dir or default_control_run_dir(recipe))
        torch.set_num_threads(recipe.threads)
        torch.manual_seed(recipe.seed)
        random.seed(recipe.seed)
        np.random.seed(recipe.seed)
        self.method = recipe.method
        self.method.setup(recipe.seed, log)
        self.config_tree = recipe.tree()
        self.iteration, self.elapsed = 0, 0.0
        self.metrics = MetricsLog(self.run_dir / "metrics.jsonl")

    @property
    def headline(self) -> str:
        return self.method.headline

    def save(self) -> Path:
        state = {"iteration": self.iteration, "elapsed": self.elapsed, "method": self.method.training_state(),
                 "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
                 "numpy_rng": numpy_rng_state(), "config": self.config_tree}
        path = save_checkpoint(self.run_dir, self.iteration, self.method.weights(), state)
        prune_checkpoints(self.run_dir, keep=2)
        return path

    def restore(self, path: Path) -> None:
        weights, state = load_checkpoint(path)
        trained = state["config"]
        try:  # fill in the settings the trained tree predates with their defaults
            trained = load_control_recipe(trained).tree()
        except ConfigError:  # a key since removed or renamed: compared as written
            pass
        changed = config_changes(trained, self.config_tree, EXTENDABLE)
        if changed:
            raise ConfigError(f"{self.run_dir / 'config.yaml'} differs from the configuration this run was trained "
                              f"with: {'; '.join(changed)}; put it back or start a new run")
        self.method.load_weights(weights)
        self.method.load_training_state(state["method"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        set_numpy_rng_state(state["numpy_rng"])
        self.iteration, self.elapsed = state["iteration"], state["elapsed"]
        self.metrics.truncate_after(self.iteration)

    def run(self, progress: Callable[[int, dict], Any] | None = None) -> list[dict]:
        """Train to ``iterations`` (or ``max_minutes``) holding the run folder's lock; returns the metrics rows."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with RunLock(self.run_dir):
            return self._run(progress)

    def _run(self, progress) -> list[dict]:
        m = self.method
        write_text_atomic(self.run_dir / "config.yaml", dump_tree(self.config_tree))
        if self.iteration == 0:
            self.metrics.truncate_after(-1)
            self.metrics.write({"step": 0, **m.evaluate()})
        budget = self.recipe.max_minutes * 60 if self.recipe.max_minutes else math.inf
        while self.iteration < m.iterations and self.elapsed < budget:
            start = time.perf_counter()
            row = {"step": self.iteration + 1, **m.iterate(self.iteration + 1)}
            self.iteration += 1
            self.elapsed += time.perf_counter() - start
            row["time/iteration"] = time.perf_counter() - start
            row["elapsed_s"] = self.elapsed
            last = self.iteration == m.iterations or self.elapsed >= budget
            if self.iteration % m.eval_every == 0 or last:
                row.update(m.evaluate())
            self.metrics.write(row)
            if progress is not None:
                progress(self.iteration, row)
            if self.iteration % m.checkpoint_every == 0 or last:
                self.save()
                plot_run(self.metrics.read(), self.run_dir / "curves.png",
                         title=f"{self.recipe.name} ({self.run_dir.name})", panels=m.panels)
        return self.metrics.read()


def resume_control(run_dir: Path, log: Callable[[str], Any] = print, overrides: list[str] = ()) -> ControlTrainer:
    """Rebuild a control run from its config.yaml and last checkpoint (``iterations``/``max_minutes`` may extend it)."""
    trainer = ControlTrainer(load_control_run_config(run_dir, overrides), run_dir, log)
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise CheckpointError(f"{run_dir} has no checkpoint to resume from; start it again instead")
    trainer.restore(ckpt)
    log(f"resumed {run_dir} at iteration {trainer.iteration}")
    return trainer
