"""Exclusive locks on a folder: one ``polo train`` per run folder, one builder per warm-start cache entry.

``RunLock(folder)`` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``folder/.polo.lock`` and writes the holder
(pid, host, start time) into it; a second acquirer, in this or any other process, gets a ``LockedError``
whose one-line message names the folder and the holder. ``RunLock(folder, wait=True)`` waits for the holder
instead. The operating system drops a flock when its holder exits or is killed (even by SIGKILL), so a
stale lock file never blocks anyone: the file stays, only the lock on it matters. flock is advisory and
per open file: it excludes other ``RunLock`` users only, and it may not hold across hosts on some network
file systems. Where ``fcntl`` does not exist (Windows) the lock is a no-op.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

LOCK_NAME = ".polo.lock"


class LockedError(RuntimeError):
    """The folder is locked by another writer; the message (one line) names the folder and the holder."""


def _holder(path: Path) -> str:
    """``pid 123 on host since 2026-01-01 10:00:00``, from the lock file (as its holder wrote it)."""
    try:
        fields = dict(part.split("=", 1) for part in path.read_text().split() if "=" in part)
    except OSError:
        fields = {}
    if "pid" not in fields:
        return "an unknown process"
    since = fields.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(since))) if since else "?"
    return f"pid {fields['pid']} on {fields.get('host', '?')} since {when}"


class RunLock:
    """Exclusive lock on ``folder`` (created if missing) through the file ``lock_path``
    (default ``folder/.polo.lock``); a context manager, or ``acquire()`` / ``release()``.

    ``wait=False``: a held lock raises ``LockedError`` at once. ``wait=True``: block until it is free,
    after logging one line naming the holder through ``log`` (if given).
    """

    def __init__(self, folder: str | Path, wait: bool = False, *, lock_path: str | Path | None = None,
                 log=None):
        self.folder = Path(folder)
        self.path = Path(lock_path) if lock_path is not None else self.folder / LOCK_NAME
        self.wait, self.log = wait, log
        self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> "RunLock":
        if self._file is not None:
            raise RuntimeError(f"{self.path} is already held by this RunLock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+")  # not "w": truncating before holding the lock would erase the holder
        if fcntl is not None:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(self.path)
                if not self.wait:
                    file.close()
                    raise LockedError(f"{self.folder} is locked by {holder} ({self.path}); "
                                      "wait for it to finish or use another folder") from None
                if self.log is not None:
                    self.log(f"waiting for the lock on {self.folder}, held by {holder}")
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_EX)
                except BaseException:
                    file.close()
                    raise
            except BaseException:
                file.close()
                raise
        file.seek(0)
        file.truncate()
        file.write(f"pid={os.getpid()} host={socket.gethostname()} since={time.time():.3f}\n")
        file.flush()
        self._file = file
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would let two processes lock two different files)."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.seek(0)
            file.truncate()
        except OSError:
            pass
        if fcntl is not None:
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        file.close()

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def __del__(self):
        if getattr(self, "_file", None) is not None:
            self._file.close()
