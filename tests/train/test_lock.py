"""RunLock: one writer per run folder, released when the holder dies; the blocking variant waits."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import polo
from polo.train.lock import LOCK_NAME, LockedError, RunLock

HOLDER = textwrap.dedent("""
    import sys, time
    from polo.train.lock import RunLock
    with RunLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _hold(folder, seconds=60.0):
    """A child process holding the lock on ``folder``, returned once it holds it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(polo.__file__)))  # polo importable from any cwd
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), str(seconds)],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_writer_fails_naming_the_holder(tmp_path):
    child = _hold(tmp_path)
    try:
        with pytest.raises(LockedError) as err:
            RunLock(tmp_path).acquire()
        message = str(err.value)
        assert "\n" not in message
        assert str(tmp_path) in message and f"pid {child.pid}" in message and "since" in message
    finally:
        child.kill()
        child.wait()


def test_lock_is_free_after_the_holder_is_killed(tmp_path):
    child = _hold(tmp_path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert (tmp_path / LOCK_NAME).exists()  # a stale file, but no lock on it
    with RunLock(tmp_path) as lock:
        assert lock.held
        assert f"pid={os.getpid()}" in (tmp_path / LOCK_NAME).read_text()
    assert not lock.held


def test_same_process_second_lock_fails_then_succeeds_after_release(tmp_path):
    first = RunLock(tmp_path / "run").acquire()  # creates the folder
    with pytest.raises(LockedError, match=f"pid {os.getpid()}"):
        RunLock(tmp_path / "run").acquire()
    first.release()
    with RunLock(tmp_path / "run"):
        pass


def test_blocking_variant_waits_for_the_holder(tmp_path):
    child = _hold(tmp_path, seconds=1.5)
    lines = []
    start = time.monotonic()
    try:
        with RunLock(tmp_path, wait=True, log=lines.append):
            waited = time.monotonic() - start
    finally:
        child.kill()
        child.wait()
    assert waited > 0.5
    assert len(lines) == 1 and "waiting" in lines[0] and f"pid {child.pid}" in lines[0]


def test_separate_lock_file(tmp_path):
    path = tmp_path / "entry.lock"
    with RunLock(tmp_path / "entry", lock_path=path):
        assert path.exists() and not (tmp_path / "entry").joinpath(LOCK_NAME).exists()
        with pytest.raises(LockedError, match="entry"):
            RunLock(tmp_path / "entry", lock_path=path).acquire()
