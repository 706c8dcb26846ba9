"""Manifests: every file of a folder with its size and sha256, written last (a folder with a valid manifest is
complete) and verified before the folder is used (checkpoints, warm-start cache entries)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "manifest.json"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> Path:
    """Write ``folder/manifest.json`` (relative path → size and sha256 of every other file under ``folder``)
    atomically and durably (fsynced, then renamed into place)."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): {"size": p.stat().st_size, "sha256": file_sha256(p)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    tmp = folder / f".{MANIFEST}.tmp"
    with open(tmp, "w") as fh:
        json.dump({"files": files}, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


def verify_manifest(folder: Path, required: tuple[str, ...] = ()) -> str | None:
    """None when the manifest parses, lists the ``required`` files (at least one file) and every listed file
    exists with its size and sha256 (sizes first, they are cheap); else a one-line reason naming the file."""
    folder = Path(folder)
    if not folder.is_dir():
        return "missing"
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
        entries = sorted((str(name), int(e["size"]), str(e["sha256"])) for name, e in files.items())
    except FileNotFoundError:
        return f"without a {MANIFEST} (written by an older polo, or never finished)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return f"with an unreadable {MANIFEST} ({type(err).__name__})"
    listed = {name for name, _, _ in entries}
    if not entries or not set(required) <= listed:
        return f"with a {MANIFEST} that lists {sorted(listed) or 'no files'} (needs {list(required) or 'one file'})"
    for name, size, _ in entries:
        try:
            have = (folder / name).stat().st_size
        except OSError:
            return f"missing {name}"
        if have != size:
            return f"corrupt: {name} has {have} bytes, the manifest says {size}"
    for name, _, sha in entries:
        try:
            if file_sha256(folder / name) != sha:
                return f"corrupt: {name} does not match its sha256 in the {MANIFEST}"
        except OSError as err:
            return f"unreadable: {name} ({err.strerror})"
    return None
