"""Small files written atomically: a temporary sibling, then a rename, so a reader or a kill never sees half a
file."""
from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (written verbatim, no newline translation) in one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, newline="")
    os.replace(tmp, path)
