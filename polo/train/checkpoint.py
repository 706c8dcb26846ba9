"""Atomic checkpoints: weights as safetensors, optimizer and random state beside them.

A checkpoint is a folder ``checkpoints/step_000123``; it is written under a temporary name and renamed
into place, so a run killed mid-write never leaves a half checkpoint that resume would pick up. Weights that
are not finite are never written. The state is loaded with ``torch.load(weights_only=True)``: tensors and
plain data only, so a crafted ``trainer_state.pt`` cannot run code; evaluation reads the safetensors alone.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

_STEP_DIR = re.compile(r"^step_(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read safely; the message names the file and the problem."""


def _contiguous(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage (tied embeddings): store independent copies.
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def save_checkpoint(
    run_dir: Path, step: int, weights: dict[str, dict[str, torch.Tensor]], state: dict[str, Any]
) -> Path:
    """Write ``weights`` (name → state dict, as safetensors) and ``state`` (torch.save) atomically; refuse
    weights that are not finite."""
    for name, sd in weights.items():
        bad = [key for key, tensor in sd.items() if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
        if bad:
            raise CheckpointError(f"step {step}: {name} weights {bad[:3]} are not finite; nothing written")
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp_step_{step:06d}_{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, sd in weights.items():
        save_file(_contiguous(sd), str(tmp / f"{name}.safetensors"))
    torch.save(state, tmp / "trainer_state.pt")
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return max(steps)[1] if steps else None


def load_weights(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The checkpoint's weights (name → state dict), from its safetensors files only."""
    return {f.stem: load_file(str(f)) for f in Path(path).glob("*.safetensors")}


def load_checkpoint(path: Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """Weights and trainer state; a state holding anything but tensors and plain data is refused unread."""
    path = Path(path)
    try:
        state = torch.load(path / "trainer_state.pt", weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path / 'trainer_state.pt'} holds objects other than tensors and plain data, "
                              f"refused without running them (was it written by polo?): "
                              f"{str(err).splitlines()[0]}") from None
    return load_weights(path), state


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Keep the ``keep`` most recent checkpoints."""
    root = Path(run_dir) / "checkpoints"
    steps = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))
    for _, p in steps[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
