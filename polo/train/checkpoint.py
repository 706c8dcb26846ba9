"""Atomic checkpoints: weights as safetensors, optimizer and random state beside them.

A checkpoint is a folder ``checkpoints/step_000123``; it is written under a temporary name and renamed
into place, so a run killed mid-write never leaves a half checkpoint that resume would pick up. Weights that
are not finite are never written. The state is loaded with ``torch.load(weights_only=True)``: tensors and
plain data only, so a crafted ``trainer_state.pt`` cannot run code; evaluation reads the safetensors alone.
Each checkpoint ends with ``manifest.json`` (every file's size and sha256): ``latest_checkpoint`` returns the
newest one that verifies, warning about each newer one it skips, and a save first removes the ``.tmp_step_*``
folders that killed writes left behind.
"""
from __future__ import annotations

import os
import pickle
import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file

from polo.train.manifest import verify_manifest, write_manifest

_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp_step_"
"""A checkpoint is written under ``.tmp_step_NNNNNN_PID`` and renamed into place when complete."""


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read safely; the message names the file and the problem."""


def _contiguous(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # safetensors refuses shared storage (tied embeddings): store independent copies.
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def _fsync(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def verify_checkpoint(path: Path) -> str | None:
    """None when the checkpoint's manifest verifies (``verify_manifest``); else a one-line reason."""
    reason = verify_manifest(path)
    return None if reason is None else f"{Path(path).name} is {reason}"


def clean_temporaries(run_dir: Path) -> list[Path]:
    """Remove ``checkpoints/.tmp_step_*`` folders left by killed writes (a run folder has a single writer)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    removed = [p for p in root.iterdir() if p.name.startswith(_TMP_PREFIX)]
    for p in removed:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return removed


def save_checkpoint(
    run_dir: Path, step: int, weights: dict[str, dict[str, torch.Tensor]], state: dict[str, Any]
) -> Path:
    """Write ``weights`` (name → state dict, as safetensors) and ``state`` (torch.save) atomically; refuse
    weights that are not finite."""
    return finish_checkpoint(begin_checkpoint(run_dir, step), step, weights, state)


def begin_checkpoint(run_dir: Path, step: int) -> Path:
    """The empty temporary folder checkpoint ``step`` is written into (``.tmp_step_NNNNNN_PID``), after removing
    those of killed writes. Sharded weights are written into it by every rank before ``finish_checkpoint``."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    clean_temporaries(run_dir)
    tmp = root / f"{_TMP_PREFIX}{step:06d}_{os.getpid()}"
    tmp.mkdir()
    return tmp


def finish_checkpoint(tmp: Path, step: int, weights: dict[str, dict[str, torch.Tensor]],
                      state: dict[str, Any]) -> Path:
    """Add ``weights`` and ``state`` to the temporary folder ``tmp`` (``begin_checkpoint(run_dir, step)``), seal
    it with its manifest and rename it into place as ``step_NNNNNN``; refuse weights that are not finite."""
    for name, sd in weights.items():
        bad = [key for key, tensor in sd.items() if tensor.is_floating_point() and not torch.isfinite(tensor).all()]
        if bad:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointError(f"step {step}: {name} weights {bad[:3]} are not finite; nothing written")
    for name, sd in weights.items():
        save_file(_contiguous(sd), str(tmp / f"{name}.safetensors"))
    torch.save(state, tmp / "trainer_state.pt")
    for f in tmp.rglob("*"):
        if f.is_file():
            _fsync(f)
    write_manifest(tmp)  # last: a folder with a valid manifest is complete
    final = tmp.parent / f"step_{step:06d}"
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    try:  # make the rename itself durable
        fd = os.open(tmp.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return final


def checkpoint_steps(run_dir: Path) -> dict[int, Path]:
    """Every ``checkpoints/step_N`` folder of ``run_dir`` by step, oldest first (verified or not)."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return {}
    return dict(sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()))


def latest_checkpoint(run_dir: Path, log: Callable[[str], Any] | None = None) -> Path | None:
    """The newest checkpoint that verifies (see ``verify_checkpoint``); each newer one that does not is skipped
    with a warning through ``log`` (default ``warnings.warn``) naming it and the reason. None if none verifies."""
    warn = log if log is not None else (lambda msg: warnings.warn(msg, stacklevel=3))
    for p in reversed(checkpoint_steps(run_dir).values()):
        reason = verify_checkpoint(p)
        if reason is None:
            return p
        warn(f"skipping checkpoint {p}: {reason}")
    return None


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0] if str(err) else ""


def _load_safetensors(f: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(f))
    except Exception as err:  # noqa: BLE001 - safetensors raises several types for a damaged file
        raise CheckpointError(f"{f} is corrupt or truncated: {type(err).__name__}: {_first_line(err)}") from None


def load_weights(path: Path) -> dict[str, dict[str, torch.Tensor]]:
    """The checkpoint's weights (name → state dict), from its safetensors files only."""
    return {f.stem: _load_safetensors(f) for f in sorted(Path(path).glob("*.safetensors"))}


def load_checkpoint(path: Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
    """Weights and trainer state; a state holding anything but tensors and plain data is refused unread."""
    path = Path(path)
    state_file = path / "trainer_state.pt"
    if not state_file.is_file():
        raise CheckpointError(f"{state_file} is missing")
    try:
        state = torch.load(state_file, weights_only=True)
    except pickle.UnpicklingError as err:
        first = _first_line(err)
        if "weights only" in str(err).lower() or "weights_only" in str(err).lower():
            raise CheckpointError(f"{state_file} holds objects other than tensors and plain data, "
                                  f"refused without running them (was it written by polo?): {first}") from None
        raise CheckpointError(f"{state_file} is corrupt: UnpicklingError: {first}") from None
    except Exception as err:  # noqa: BLE001 - truncated zip, bad magic number, EOF ...
        raise CheckpointError(f"{state_file} is corrupt or truncated: {type(err).__name__}: "
                              f"{_first_line(err)}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{state_file} is corrupt: holds a {type(state).__name__}, not the trainer state")
    return load_weights(path), state


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Keep the ``keep`` most recent checkpoints."""
    for p in list(checkpoint_steps(run_dir).values())[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
