"""Files and folders written atomically: a temporary sibling, then a rename, so a reader or a kill never sees half
a file or a half-written folder."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from polo.core.registry import ConfigError


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (written verbatim, no newline translation) in one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, newline="")
    os.replace(tmp, path)


def check_replaceable_dir(out: Path, marker: str, what: str) -> None:
    """Refuse ``out`` unless it is new, an empty folder, or a folder holding ``marker`` (one this kind of writer
    made before, which ``install_dir`` may replace); ``what`` names the folder in the error."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(f"{what} {str(out)!r} is not a folder: expected a new, empty or previously written folder")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).is_file():
        raise ConfigError(f"{what} {str(out)!r} is not empty and holds no {marker} (not one written before): "
                          f"refusing to overwrite it; choose a new folder")


def temporary_dir(out: Path) -> Path:
    """A fresh, empty sibling of ``out`` to write a folder into before ``install_dir`` renames it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp_{out.name}_{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def install_dir(tmp: Path, out: Path) -> None:
    """Rename the finished folder ``tmp`` to ``out``; a non-empty ``out`` (checked by ``check_replaceable_dir``)
    is moved aside first and removed once the new folder is in place, an empty one is replaced by the rename."""
    old = out.parent / f".old_{out.name}_{os.getpid()}"
    if out.is_dir() and any(out.iterdir()):
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
