"""Run untrusted Python programs in isolated processes and read back what their function returned.

``run_program(source, calls, limits)`` defines the program in a child process of its own, calls its function
(``function``, default ``f``) on each argument tuple of ``calls`` and returns a ``SandboxResult``: per call the
JSON text of the return value, or the exception's type name, or ``timeout`` / ``not run``; the status
(``ok``, ``timeout``, ``limit``: killed by a resource limit, ``crashed``) and the tails of stdout and stderr.
Expected outputs never enter the child: ``run_tests`` compares the returned values with them here, so a
program that prints fake PASS lines, exits early, patches the harness or forges frames on the result pipe can
at most change which values come back, and a wrong value fails. ``run_batch`` runs many programs concurrently
(a thread pool over the child processes); ``check_programs`` adds a bounded in-process cache, so the rewards
and the ``test_results`` input of one training step run each program once.

Isolation (docs/sandbox.md says exactly what each mode guarantees): one process per program, of an
interpreter started with ``python -I -S`` and a scrubbed environment, in a fresh temporary directory deleted
afterwards; rlimits on CPU time, address space, file size, processes, open files and core dumps; a wall-clock
timeout that kills the whole process tree; as root, the program runs as a per-slot unprivileged uid. Mode
``namespace`` (where this process may create namespaces) adds new PID, network and mount namespaces: no
network at all, a read-only view of the system and Python directories plus a size-limited ``/work``, every
process gone when the namespace's init exits. Mode ``subreaper`` is the fallback: a supervisor that is a child
subreaper kills every descendant left, and the kernel guard (``kernel_guard.py``: Landlock confines files to
read-only system and Python directories and the writable work directory, and TCP; a seccomp filter refuses
process creation, sockets and signals or tracing aimed at other processes) is the boundary, with Python audit
hooks as defense in depth. Where the kernel offers neither layer, subreaper mode refuses to run anything unless
``allow_weak_isolation`` is set. The processes are forked from a warm fork server (``sandbox_harness.py``), one
per process that uses the sandbox.
"""
from __future__ import annotations

import fcntl
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from polo.core.registry import ConfigError, Settings
from polo.tasks import kernel_guard

HARNESS = Path(__file__).with_name("sandbox_harness.py")
UID_BASE = 1_500_000_000
"""Sandbox uids (and gids) are ``UID_BASE + slot``: unused by any account, one per concurrently running program."""
SLOTS = 4096
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
BACKSTOP_S = 10.0
"""Seconds past the timeout after which the parent kills a supervisor that has not finished (it never should)."""
FRAME_OVERHEAD = 64
"""Bytes of a frame besides its value's JSON text (kind, index, brackets)."""
ENV = {"PATH": "/usr/bin:/bin"}
"""The whole environment of the sandbox processes."""

Mode = Literal["auto", "namespace", "subreaper"]


class SandboxLimits(Settings):
    """How a program is isolated and what it may use."""

    mode: Mode = "auto"
    """``namespace`` (PID, network and mount namespaces), ``subreaper`` (the fallback without namespaces, confined
    by Landlock and seccomp; refused where the kernel offers neither, unless ``allow_weak_isolation``) or
    ``auto``: ``namespace`` when it works on this machine (probed once per process), else ``subreaper``."""
    timeout_s: float = Field(2.0, gt=0)
    """Wall-clock seconds for the whole program (definition and every call); then its process tree is killed."""
    cpu_seconds: int = Field(1, ge=1)
    """CPU-time limit (RLIMIT_CPU, whole seconds: SIGXCPU, then SIGKILL one second later)."""
    memory_mb: int = Field(256, ge=32)
    """Address-space limit (RLIMIT_AS) in MiB; allocating past it raises MemoryError in the program."""
    file_size_kb: int = Field(1024, ge=0)
    """Largest file the program may write (RLIMIT_FSIZE), KiB."""
    workdir_mb: int = Field(8, ge=1)
    """Size of the writable work directory, MiB (namespace mode: a tmpfs of this size; subreaper mode: at most
    ``workdir_mb / file_size_kb`` files opened for writing)."""
    processes: int = Field(16, ge=1)
    """Processes and threads of the sandbox uid (RLIMIT_NPROC; as root each program has its own uid)."""
    open_files: int = Field(32, ge=8)
    """Open file descriptors (RLIMIT_NOFILE)."""
    output_bytes: int = Field(4096, ge=0)
    """Bytes kept of stdout and of stderr (their tails); the rest is read and discarded."""
    value_bytes: int = Field(65536, ge=16)
    """Longest JSON text of one return value; a longer one is the error ``ValueTooLarge``."""
    allow_weak_isolation: bool = False
    """Run programs in ``subreaper`` mode even where the kernel offers neither Landlock nor seccomp, behind
    Python audit hooks only (which a program can patch: not a boundary). Off: such a run is refused with an
    error that names this setting. Namespace mode and a subreaper mode with a kernel guard ignore it."""

    def job_limits(self) -> dict[str, Any]:
        """The limits in the units the harness applies."""
        return {"timeout_s": self.timeout_s, "cpu_seconds": self.cpu_seconds, "memory_bytes": self.memory_mb << 20,
                "file_size_bytes": self.file_size_kb << 10, "workdir_bytes": self.workdir_mb << 20,
                "processes": self.processes, "open_files": self.open_files, "value_bytes": self.value_bytes}


@dataclass(frozen=True)
class CallOutcome:
    """What one call gave: ``value`` (``text`` is its JSON), ``error`` (``text`` names the exception, or is
    ``exited`` / ``killed`` when the process ended during the call, or ``conflicting results``), ``timeout`` or
    ``not run``."""

    kind: Literal["value", "error", "timeout", "not run"]
    text: str = ""

    def matches(self, expected: Any) -> bool:
        """Whether the call returned ``expected``: equal canonical JSON (so ``True`` is not ``1``, ``1.0`` is not
        ``1``, and a tuple equals the list with its items)."""
        if self.kind != "value":
            return False
        try:
            return canonical(json.loads(self.text)) == canonical(expected)
        except (ValueError, RecursionError):
            return False


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False)


@dataclass
class SandboxResult:
    """One program's run: its status, one ``CallOutcome`` per call, the tails of its output, and what the
    supervisor measured (exit code or signal, CPU seconds, processes left behind and killed)."""

    status: Literal["ok", "timeout", "limit", "crashed"]
    calls: list[CallOutcome]
    stdout: str = ""
    stderr: str = ""
    mode: str = ""
    exit: int | None = None
    signal: int | None = None
    cpu_s: float | None = None
    leftover: int = 0
    guard: tuple[str, ...] = ()
    """The kernel guard's layers (``landlock``, ``seccomp``) the program's process applied before it ran
    (subreaper mode; empty in namespace mode, and in subreaper mode only with ``allow_weak_isolation``)."""
    seconds: float = 0.0
    detail: str = ""
    """Why results are missing or rejected (a malformed result stream, a supervisor failure), else empty."""

    def passed(self, expected: Sequence[Any]) -> list[bool]:
        """Per call, whether it returned the corresponding ``expected`` value."""
        return [call.matches(want) for call, want in zip(self.calls, expected)]


def frame_cap(value_bytes: int) -> int:
    """The longest valid frame: a value's JSON text escaped once more inside the frame's JSON (``"`` and ``\\``
    double; the text is ASCII) plus the overhead."""
    return 2 * value_bytes + FRAME_OVERHEAD


def parse_frames(data: bytes, n_calls: int, value_bytes: int, status: str) -> tuple[list[CallOutcome], str]:
    """The calls' outcomes from the result stream (frames: 4-byte big-endian length, then a JSON array
    ``["start", i]``, ``["value", i, json_text]`` or ``["error", i, name]``) and what was wrong with it, if
    anything. Parsing stops at the first malformed frame; a call reported twice is ``conflicting results``; a
    call started but never reported is ``timeout`` when the run timed out, else ``killed`` or ``exited``."""
    results: dict[int, CallOutcome] = {}
    started, problem, pos = set(), "", 0
    while pos < len(data) and not problem:
        size = int.from_bytes(data[pos:pos + 4], "big")
        body = data[pos + 4:pos + 4 + size]
        pos += 4 + size
        if size > frame_cap(value_bytes) or len(body) < size:
            problem = f"malformed frame at byte {pos - 4 - size}: length {size}"
            break
        try:
            item = json.loads(body)
            kind, index = item[:2] if isinstance(item, list) else (None, None)
            valid = (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < n_calls
                     and (kind == "start" and len(item) == 2
                          or kind in ("value", "error") and len(item) == 3 and isinstance(item[2], str)))
            if valid and kind == "value":
                json.loads(item[2])
        except (ValueError, RecursionError):
            valid = False
        if not valid:
            problem = f"malformed frame {body[:80]!r}"
        elif kind == "start":
            started.add(index)
        elif index in results:
            results[index] = CallOutcome("error", "conflicting results")
        else:
            results[index] = CallOutcome(kind, item[2])
    unfinished = {"timeout": CallOutcome("timeout"), "limit": CallOutcome("error", "killed")}.get(
        status, CallOutcome("error", "exited"))
    calls = [results.get(i, unfinished if i in started else CallOutcome("not run")) for i in range(n_calls)]
    return calls, problem


class Slots:
    """Sandbox uids claimed for this process: a uid is locked (``flock`` on a file under the temp directory)
    the first time it is needed and kept until the process exits, so concurrent programs, here or in other
    processes, never share a uid (their process limits and kills stay separate)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[int] = []
        self.held: dict[int, int] = {}  # uid -> its lock file's fd, kept open
        self.next = 0

    def claim(self) -> int:
        with self.lock:
            if self.free:
                return self.free.pop()
            folder = Path(tempfile.gettempdir()) / "polo-sandbox-slots"
            folder.mkdir(mode=0o700, exist_ok=True)
            info = folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
                raise RuntimeError(f"sandbox: {folder} must be a directory of this user with mode 700")
            for _ in range(SLOTS):
                slot, self.next = self.next, (self.next + 1) % SLOTS
                fd = os.open(folder / str(slot), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self.held[UID_BASE + slot] = fd
                return UID_BASE + slot
            raise RuntimeError(f"sandbox: all {SLOTS} uid slots are taken")

    def release(self, uid: int) -> None:
        with self.lock:
            self.free.append(uid)

    def claimed(self) -> list[int]:
        """The uids this process holds."""
        with self.lock:
            return sorted(self.held)


SLOT_POOL = Slots()


def python_dirs() -> list[str]:
    """The directories the interpreter and its standard library live in."""
    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.path.dirname(sys.executable))}
    return sorted(dirs)


def bind_list() -> list[str]:
    """Paths bound read-only into the namespace's root: the system directories that exist and the Python
    directories, without any path below another one."""
    paths = sorted({p for p in SYSTEM_DIRS if os.path.lexists(p)} | set(python_dirs()))
    kept: list[str] = []
    for path in paths:
        if not any(path.startswith(k.rstrip("/") + "/") for k in kept if not os.path.islink(k)):
            kept.append(path)
    return kept


class Server:
    """The harness's fork server (``sandbox_harness.py serve``), started on first use and again when it died or
    this process was forked; a job goes to it as its job file's path with the four pipes' write ends attached."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.owner = 0

    def submit(self, job_file: str, fds: Sequence[int]) -> None:
        with self.lock:
            for _ in range(2):
                if self.proc is None or self.proc.poll() is not None or self.owner != os.getpid():
                    self._start()
                try:
                    socket.send_fds(self.sock, [job_file.encode()], list(fds))
                    return
                except OSError:
                    self.proc = None
        raise RuntimeError("sandbox: the fork server does not accept jobs")

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(HARNESS), "serve", str(theirs.fileno())],
                                         pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, env=ENV, start_new_session=True)
        self.sock, self.owner = ours, os.getpid()


SERVER = Server()


def read_streams(fds: dict[str, int], limits: SandboxLimits, result_cap: int,
                 deadline: float) -> tuple[dict[str, bytes], bool, bool]:
    """Read the job's pipes (``fds``: stdout, stderr, result, status) until all are closed or ``deadline``
    passes, keeping the tails of stdout and stderr and at most the caps of the others; returns the bytes,
    whether the result stream overflowed and whether the deadline passed."""
    caps = {"stdout": limits.output_bytes, "stderr": limits.output_bytes, "result": result_cap, "status": 4096}
    names = {fd: name for name, fd in fds.items()}
    data = {name: b"" for name in caps}
    overflow = False
    with selectors.DefaultSelector() as selector:
        for fd in names:
            selector.register(fd, selectors.EVENT_READ)
        while names:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, overflow, True
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                name = names[key.fd]
                if not chunk:
                    selector.unregister(key.fd)
                    del names[key.fd]
                elif name in ("stdout", "stderr"):
                    data[name] = (data[name] + chunk)[-caps[name]:] if caps[name] else b""
                else:
                    room = caps[name] - len(data[name])
                    overflow |= name == "result" and len(chunk) > room
                    data[name] += chunk[:max(room, 0)]
    return data, overflow, False


def reap_uid(uid: int) -> None:
    """Kill every process of ``uid`` (after a supervisor had to be killed in subreaper mode)."""
    subprocess.run([sys.executable, "-I", "-S", str(HARNESS), "reap", str(uid)], env=ENV,
                   timeout=30, check=False, capture_output=True)


def _prepare(folder: str, mode: str, uid: int | None, source: str, function: str, calls: list,
             limits: SandboxLimits, guard: tuple[str, ...]) -> str:
    """Write the job file into ``folder`` (and, in subreaper mode, the work directory the program owns)."""
    if mode == "subreaper":
        work = os.path.join(folder, "work")
        os.mkdir(work, 0o700)
        if uid is not None:
            os.chmod(folder, 0o711)
            os.chown(work, uid, uid)
    job = {"source": source, "function": function, "calls": calls, "limits": limits.job_limits(), "mode": mode,
           "root": folder, "uid": uid, "gid": uid, "binds": bind_list(),
           "read_roots": [*python_dirs(), *SYSTEM_DIRS, *DEVICES], "devices": list(DEVICES), "guard": list(guard)}
    path = os.path.join(folder, "job.json")
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(job, f)
    return path


def run_program(source: str, calls: Sequence[Sequence[Any]], limits: SandboxLimits | None = None,
                function: str = "f") -> SandboxResult:
    """Run ``source`` in a sandbox and call ``function(*args)`` for each ``args`` of ``calls`` (JSON-able
    values; see the module docstring). Never raises for anything the program does."""
    limits = limits or SandboxLimits()
    mode = isolation_mode(limits.mode)
    guard = guard_layers(mode, limits)
    calls = [list(args) for args in calls]
    uid = SLOT_POOL.claim() if os.geteuid() == 0 else None
    folder = tempfile.mkdtemp(prefix="polo-sandbox-")
    pipes = {name: os.pipe() for name in ("stdout", "stderr", "result", "status")}
    start = time.monotonic()
    try:
        job = _prepare(folder, mode, uid, source, function, calls, limits, guard)
        SERVER.submit(job, [w for _, w in pipes.values()])
        for name, (r, w) in pipes.items():
            os.close(w)
            pipes[name] = (r, -1)
        result_cap = len(calls) * (frame_cap(limits.value_bytes) + 2 * FRAME_OVERHEAD) + 4096
        data, overflow, late = read_streams({name: r for name, (r, _) in pipes.items()}, limits, result_cap,
                                            start + limits.timeout_s + BACKSTOP_S)
        pid_line, _, report_text = data["status"].partition(b"\n")
        guard_line, _, report_text = report_text.rpartition(b"\n")
        if late:
            _kill_job(pid_line, mode, uid)
    finally:
        for fd in (fd for pair in pipes.values() for fd in pair if fd >= 0):
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        if uid is not None:
            SLOT_POOL.release(uid)
    try:
        report = json.loads(report_text)
        status = report["status"] if report["status"] in ("ok", "timeout", "limit", "crashed") else "crashed"
        detail = ""
    except (ValueError, KeyError, TypeError):
        report, status = {}, "timeout" if late else "crashed"
        detail = "the supervisor reported no status"
    outcomes, problem = parse_frames(data["result"], len(calls), limits.value_bytes, status)
    detail = "; ".join(d for d in (detail, problem, "result stream over its cap" if overflow else "") if d)
    return SandboxResult(status, outcomes, data["stdout"].decode(errors="replace"),
                         data["stderr"].decode(errors="replace"), mode, report.get("exit"), report.get("signal"),
                         report.get("cpu_s"), report.get("leftover", 0),
                         tuple(guard_line.decode(errors="replace").split()[1:]), time.monotonic() - start, detail)


def _kill_job(pid_line: bytes, mode: str, uid: int | None) -> None:
    """The last resort when a supervisor overran its deadline: kill the job's process (in namespace mode the
    namespace's init dies with it, and every process of the namespace with the init) and, in subreaper mode,
    every process of the sandbox uid."""
    if pid_line.isdigit():
        try:
            os.kill(int(pid_line), signal.SIGKILL)
        except ProcessLookupError:
            pass
    if mode == "subreaper" and uid is not None:
        reap_uid(uid)


_mode_lock = threading.Lock()
_probed: str | None = None


def isolation_mode(requested: Mode = "auto") -> str:
    """The mode a run gets: ``requested``, or for ``auto`` whether namespace mode works here (probed once per
    process by running a one-line program; a failure warns once, with the reason, and selects subreaper)."""
    global _probed
    if requested != "auto":
        return requested
    with _mode_lock:
        if _probed is None:
            try:
                probe = run_program("def f():\n    return 1\n", [()], SandboxLimits(mode="namespace", timeout_s=10))
                why = "" if probe.calls[0].matches(1) else f"{probe.status}: {probe.detail or probe.stderr}"
            except (OSError, RuntimeError) as err:
                why = str(err)
            _probed = "subreaper" if why else "namespace"
            if why:
                warnings.warn(f"sandbox: namespace isolation is unavailable here ({why.strip()[-300:]}); programs "
                              f"run in subreaper mode (docs/sandbox.md)", RuntimeWarning, stacklevel=2)
        return _probed


def guard_layers(mode: str, limits: SandboxLimits) -> tuple[str, ...]:
    """The kernel guard's layers a run in ``mode`` applies: none in namespace mode; in subreaper mode every
    layer this machine offers (probed once per process), and where it offers none a ConfigError, unless
    ``limits.allow_weak_isolation``."""
    if mode != "subreaper":
        return ()
    layers = kernel_guard.available_layers()
    if not layers and not limits.allow_weak_isolation:
        why = "namespaces are unavailable and " if limits.mode == "auto" else ""
        raise ConfigError(f"sandbox: {why}subreaper mode has no kernel boundary here (neither Landlock nor seccomp "
                          f"is available), so it refuses to run untrusted code; set "
                          f"sandbox.allow_weak_isolation: true to run it behind Python audit hooks only")
    return layers


def unavailable(mode: str) -> str:
    """Why ``mode`` (``namespace`` or ``subreaper``) cannot run untrusted programs on this machine without
    ``allow_weak_isolation``; empty when it can."""
    if mode == "namespace" and isolation_mode("auto") != "namespace":
        return "namespace isolation is unavailable on this machine"
    if mode == "subreaper" and not kernel_guard.available_layers():
        return "subreaper mode refuses here: the kernel offers neither Landlock nor seccomp"
    return ""


def default_concurrency() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class Program:
    """A program and the argument tuples to call its ``function`` with."""

    source: str
    calls: tuple[tuple[Any, ...], ...]
    function: str = "f"


def run_batch(programs: Sequence[Program], limits: SandboxLimits | None = None,
              concurrency: int | None = None) -> list[SandboxResult]:
    """``run_program`` of each program, ``concurrency`` (default: the usable CPUs) at a time."""
    limits = limits or SandboxLimits()
    guard_layers(isolation_mode(limits.mode), limits)  # probe once (and refuse), before the threads start
    workers = max(1, min(concurrency or default_concurrency(), len(programs)))
    with ThreadPoolExecutor(workers, thread_name_prefix="polo-sandbox") as pool:
        return list(pool.map(lambda p: run_program(p.source, p.calls, limits, p.function), programs))


def run_tests(source: str, tests: Sequence[tuple[Sequence[Any], Any]], limits: SandboxLimits | None = None,
              function: str = "f") -> list[bool]:
    """Per test ``(args, expected)``, whether ``function(*args)`` returned ``expected`` (compared here)."""
    result = run_program(source, [args for args, _ in tests], limits, function)
    return result.passed([expected for _, expected in tests])


@dataclass(frozen=True)
class ProgramTests:
    """A program with its hidden tests, ``(args, expected)`` pairs."""

    source: str
    tests: tuple[tuple[tuple[Any, ...], Any], ...]
    function: str = "f"

    def program(self) -> Program:
        return Program(self.source, tuple(args for args, _ in self.tests), self.function)


class ResultCache:
    """A bounded LRU of per-test outcomes, keyed by program, tests and limits (thread-safe)."""

    def __init__(self, maxsize: int = 8192):
        self.maxsize = maxsize
        self.entries: OrderedDict[tuple, list[bool]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple) -> list[bool] | None:
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
            return None

    def put(self, key: tuple, value: list[bool]) -> None:
        with self.lock:
            self.entries[key] = value
            self.entries.move_to_end(key)
            while len(self.entries) > self.maxsize:
                self.entries.popitem(last=False)


RESULTS = ResultCache()


def check_programs(programs: Sequence[ProgramTests], limits: SandboxLimits | None = None,
                  concurrency: int | None = None, cache: ResultCache | None = None) -> list[list[bool]]:
    """Per program, whether each of its tests passed. Each distinct (program, tests, limits) runs once while it
    stays in ``cache`` (default: the process's ``RESULTS``): repeated completions of a group and later reads of
    the same batch cost nothing."""
    limits, cache = limits or SandboxLimits(), RESULTS if cache is None else cache
    settings = limits.model_dump_json()
    keys = [(p.source, p.function, canonical(p.tests), settings) for p in programs]
    found = {k: v for k in keys if (v := cache.get(k)) is not None}
    missing = {k: p for k, p in zip(keys, programs) if k not in found}
    if missing:
        results = run_batch([p.program() for p in missing.values()], limits, concurrency)
        for (key, program), result in zip(missing.items(), results):
            found[key] = result.passed([expected for _, expected in program.tests])
            cache.put(key, found[key])
    return [found[k] for k in keys]
