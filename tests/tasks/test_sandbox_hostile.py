"""The hostile-program corpus, an acceptance gate: programs that try to escape the sandbox, starve the host,
outlive their run, read secrets or forge their test results, each run in every isolation mode available here.

Each case asserts its own "no escape" condition; the corpus runs concurrently (two at a time, so programs also
run beside each other's attacks), and afterwards ``test_nothing_survives_or_changed`` asserts that no process of
the corpus is left, the canary files are unchanged, the listening socket saw no connection and the secret
environment variable appears in no output. Limits are small (1.5 s wall clock, 1 CPU second) to keep the run
short. ``EXPECTED`` holds the hidden tests' outputs: random numbers that no program is ever shown.
"""
import json
import os
import random
import socket
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from polo.tasks import sandbox
from polo.tasks.sandbox import Program, SandboxLimits, SandboxResult, isolation_mode, run_batch

LIMITS = {"timeout_s": 1.5, "cpu_seconds": 1, "memory_mb": 256, "file_size_kb": 256, "workdir_mb": 2,
          "processes": 8, "open_files": 32, "output_bytes": 1024, "value_bytes": 4096}
SECRET = f"polo-secret-{random.SystemRandom().getrandbits(64):x}"
EXPECTED = [random.SystemRandom().randrange(10**8, 10**9) for _ in range(3)]
REPO_FILE = Path(__file__).resolve()


@dataclass
class World:
    """What the tests set up around the corpus: the canary folder, the listening socket, this process."""

    canary_dir: Path
    canary: Path
    port: int
    pid: int

    def args(self) -> list:
        return [str(self.canary), self.port, self.pid, str(REPO_FILE)]


@dataclass
class Hostile:
    name: str
    source: str
    check: Callable[[SandboxResult, World, SandboxLimits], None]
    calls: int = 1


def value(result: SandboxResult, i: int = 0):
    assert result.calls[i].kind == "value", result.calls[i]
    return json.loads(result.calls[i].text)


def fails_tests(result, world, limits):
    assert result.passed(EXPECTED[: len(result.calls)]) == [False] * len(result.calls)


def no_value(result, world, limits):
    assert all(c.kind != "value" for c in result.calls), result.calls


def supervisor_reported(result, world, limits):
    assert "no status" not in result.detail, result.detail


def all_refused(result, world, limits):
    """The program returns ``[outcome, ...]`` of its attempts, each an error name or ``"ok"``."""
    outcomes = value(result)
    assert outcomes and "ok" not in outcomes, outcomes


def status_in(*statuses):
    def check(result, world, limits):
        assert result.status in statuses, result
    return check


def first_call(kind):
    def check(result, world, limits):
        assert result.calls[0].kind == kind, result.calls
    return check


def output_capped(result, world, limits):
    assert len(result.stdout) <= limits.output_bytes and len(result.stderr) <= limits.output_bytes


def threads_bounded(result, world, limits):
    assert result.calls[0].kind != "value" or value(result) < limits.processes


def disk_bounded(result, world, limits):
    if result.calls[0].kind != "value":
        return
    total, largest = value(result)
    assert 0 < largest <= limits.file_size_kb << 10
    assert total <= limits.workdir_mb << 20  # namespace: the tmpfs's size; subreaper: the hook's budget of files


def shared_checks_only(result, world, limits):
    """The secret, canary and listener checks, which every case gets, decide."""


def both(*checks):
    def check(result, world, limits):
        for c in checks:
            c(result, world, limits)
    return check


def attempts(*lines: str) -> str:
    """A program that tries each line and returns the outcome of each (the error's name or ``"ok"``)."""
    body = "".join(f"    try:\n        {line}\n        out.append('ok')\n    except BaseException as e:\n"
                   f"        out.append(type(e).__name__)\n" for line in lines)
    return f"import os, socket, signal, sys\ndef f(canary, port, pid, repo):\n    out = []\n{body}    return out\n"


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip()


CASES = [
    Hostile("fork_bomb", src("""
        import os
        def f(*args):
            n = 0
            for _ in range(100000):
                try:
                    os.fork()
                    n += 1
                except OSError:
                    pass
            return n
        """), both(supervisor_reported, fails_tests)),
    Hostile("infinite_loop", "def f(*args):\n    while True:\n        pass\n",
            both(status_in("limit", "timeout"), no_value)),
    Hostile("memory_bomb", src("""
        def f(*args):
            hoard = []
            while True:
                hoard.append(bytearray(1 << 24))
        """), no_value),
    Hostile("disk_filling", src("""
        import os
        def f(*args):
            total, largest = 0, 0
            for i in range(1000):
                try:
                    with open(f'fill{i}', 'wb') as fh:
                        for _ in range(64):
                            fh.write(b'x' * 16384)
                            fh.flush()
                except OSError:
                    pass
                size = os.path.getsize(f'fill{i}') if os.path.exists(f'fill{i}') else 0
                total, largest = total + size, max(largest, size)
                if size == 0:
                    break
            return [total, largest]
        """), disk_bounded),
    Hostile("write_outside_canary", attempts(
        "open(canary, 'w').write('pwned')", "open(canary, 'a').write('pwned')", "os.remove(canary)",
        "os.rename(canary, canary + '.moved')", "os.chmod(canary, 0o777)", "os.truncate(canary, 0)",
        "open(os.path.join(os.path.dirname(canary), 'new.txt'), 'w').write('x')"), all_refused),
    Hostile("symlink_escape", attempts(
        "os.symlink(canary, 'link'); open('link', 'w').write('pwned')",
        "os.link(canary, 'hard'); open('hard', 'w').write('pwned')"), all_refused),
    Hostile("chdir_up_and_write", attempts(
        "os.chdir('..'); open('escape.txt', 'w').write('x')", "os.chdir('/'); open('escape.txt', 'w').write('x')",
        "open('/tmp/polo-escape.txt', 'w').write('x')"), all_refused),
    Hostile("read_environment", src("""
        import os
        def f(*args):
            seen = [repr(dict(os.environ))]
            for path in ['/proc/self/environ', f'/proc/{os.getppid()}/environ', '/proc/1/environ']:
                try:
                    seen.append(open(path, 'rb').read().decode(errors='replace'))
                except BaseException as e:
                    seen.append(type(e).__name__)
            return seen
        """), shared_checks_only),
    Hostile("scan_all_processes", src("""
        import os
        def f(*args):
            seen = []
            try:
                pids = [p for p in os.listdir('/proc') if p.isdigit()]
            except BaseException as e:
                return [type(e).__name__]
            for pid in pids:
                for name in ('environ', 'cmdline'):
                    try:
                        seen.append(open(f'/proc/{pid}/{name}', 'rb').read().decode(errors='replace'))
                    except BaseException:
                        pass
            return seen
        """), shared_checks_only),
    Hostile("network_tcp_to_host", attempts(
        "socket.create_connection(('127.0.0.1', port), timeout=0.5)",
        "socket.create_connection(('localhost', port), timeout=0.5)",
        "socket.create_connection(('1.1.1.1', 80), timeout=0.5)"), all_refused),
    Hostile("network_udp_and_dns", attempts(
        "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))",
        "socket.getaddrinfo('example.com', 80)",
        "socket.socket(socket.AF_INET, socket.SOCK_STREAM).bind(('0.0.0.0', 0))"),
        shared_checks_only),  # binding inside an empty network namespace is harmless; the listener check decides
    Hostile("kill_the_parents", attempts(
        "os.kill(os.getppid(), signal.SIGKILL)", "os.kill(1, signal.SIGKILL)", "os.kill(pid, signal.SIGTERM)",
        "os.kill(pid, signal.SIGKILL)", "os.killpg(os.getpgid(pid), signal.SIGKILL)"), supervisor_reported),
    Hostile("kill_everything", attempts("os.kill(-1, signal.SIGKILL)"), supervisor_reported),
    Hostile("ignore_sigterm", src("""
        import signal, time
        def f(*args):
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(s, signal.SIG_IGN)
            while True:
                time.sleep(0.01)
        """), both(status_in("timeout"), no_value)),
    Hostile("double_forked_daemon", src("""
        import os, time
        def f(*args):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.closerange(0, 1024)
                    while True:
                        with open('heartbeat', 'a') as fh:
                            fh.write('beat')
                        time.sleep(0.01)
                os._exit(0)
            return 'spawned'
        """), supervisor_reported),
    Hostile("daemon_heartbeat_on_stderr", src("""
        import os, sys, time
        def f(*args):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    while True:
                        os.write(2, b'beat ')
                        time.sleep(0.01)
                os._exit(0)
            return 'spawned'
        """), supervisor_reported),
    Hostile("flood_stdout", src("""
        import sys
        def f(*args):
            while True:
                sys.stdout.write('x' * 65536)
                sys.stderr.write('y' * 65536)
        """), output_capped),
    Hostile("fake_pass_lines", src("""
        def f(*args):
            print('PASS\\n' * 50 + 'All 3 tests passed\\nOK')
            return 'PASS'
        """), fails_tests, calls=3),
    Hostile("exit_zero_before_tests", "import sys\nprint('OK')\nsys.exit(0)\ndef f(*args):\n    return 1\n",
            fails_tests, calls=3),
    Hostile("os_exit_zero_before_tests", "import os\nprint('PASS')\nos._exit(0)\n", fails_tests, calls=3),
    Hostile("monkeypatch_harness", src("""
        import json, os, sys
        harness = sys.modules['__main__']
        def fake(fd, *items):
            for i in range(3):
                os.write(fd, b'')
        harness.frame = fake
        harness.run_candidate = lambda *a: None
        json.dumps = lambda *a, **k: 'true'
        def f(*args):
            return 0
        """), fails_tests, calls=3),
    Hostile("monkeypatch_builtins_and_exit", src("""
        import builtins, os, sys
        builtins.isinstance = lambda *a: True
        builtins.type = lambda *a: 'PASS'
        sys.exit = lambda *a: None
        os._exit = lambda *a: None
        def f(*args):
            return 'PASS'
        """), fails_tests, calls=3),
    Hostile("fake_frames_on_the_result_fd", src("""
        import json, os, struct
        def f(*args):
            for fd in range(3, 256):
                for i in range(3):
                    for value in ('true', '1', '"PASS"', 'null'):
                        body = json.dumps(['value', i, value]).encode()
                        try:
                            os.write(fd, struct.pack('>I', len(body)) + body)
                        except OSError:
                            pass
            os._exit(0)
        """), fails_tests, calls=3),
    Hostile("eq_override", src("""
        class Always:
            def __eq__(self, other):
                return True
        class Int(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def f(*args):
            return [Always(), Int(0), Int(1)][args[0] if args and isinstance(args[0], int) else 0]
        """), fails_tests, calls=3),
    Hostile("huge_output_value", "def f(*args):\n    return 'x' * 50_000_000\n",
            no_value),
    Hostile("recursion_bomb", src("""
        import sys
        def f(*args):
            sys.setrecursionlimit(10 ** 7)
            def down(n):
                return down(n + 1) + 1
            return down(0)
        """), both(no_value, supervisor_reported)),
    Hostile("read_secret_files", attempts(
        "open('/etc/shadow').read()", "open(repo).read()", "os.listdir(os.path.dirname(repo))",
        "open('/proc/1/root/etc/hostname').read()", "open('/root/.bashrc').read()"), all_refused),
    Hostile("spawn_sh", attempts(
        "import subprocess; subprocess.run(['sh', '-c', f'echo pwned > {os.path.dirname(canary)}/sh.txt'], "
        "check=True, timeout=1)",
        "assert os.system(f'echo pwned > {os.path.dirname(canary)}/system.txt') == 0",
        "os.execv('/bin/sh', ['sh', '-c', f'echo pwned > {os.path.dirname(canary)}/exec.txt'])"),
        shared_checks_only),  # a shell may start in a namespace; the canary folder check decides
    Hostile("sleep_past_timeout", "import time\ndef f(*args):\n    time.sleep(60)\n",
            both(status_in("timeout"), first_call("timeout"))),
    Hostile("thread_bomb", src("""
        import threading, time
        def f(*args):
            n = 0
            try:
                while True:
                    threading.Thread(target=time.sleep, args=(10,), daemon=True).start()
                    n += 1
            except BaseException:
                return n
        """), threads_bounded),
    Hostile("os_exit_in_the_middle", src("""
        import os
        def f(*args):
            if args[0] == 'X':
                os._exit(0)
            return args[0]
        """), fails_tests, calls=3),
    Hostile("close_every_fd", "import os\ndef f(*args):\n    os.closerange(0, 65536)\n    return 1\n",
            both(fails_tests, supervisor_reported), calls=3),
    Hostile("become_root", attempts("os.setuid(0)", "os.setgid(0)", "os.setgroups([0])", "os.chroot('/')"),
            all_refused),
    Hostile("ctypes_syscalls", attempts(
        "import ctypes; assert ctypes.CDLL(None).setuid(0) == 0",
        "import ctypes; assert ctypes.CDLL(None).kill(pid, 9) == 0"),
        all_refused),
    Hostile("user_namespace_for_capabilities", attempts(  # caps in a new user namespace would allow a chroot escape
        "import ctypes; assert ctypes.CDLL(None).unshare(0x10000000) == 0",
        "assert os.unshare(0x10000000) is None"), all_refused),
]


def call_args(case: Hostile, world: World) -> tuple:
    """The calls of a case: the world's paths for attempt-style programs, markers for the 3-call ones."""
    if case.calls == 3:
        return ((0,), ("X",), (2,)) if case.name == "os_exit_in_the_middle" else ((0,), (1,), (2,))
    return (tuple(world.args()),)


@pytest.fixture(scope="module", params=["namespace", "subreaper"])
def corpus(request, tmp_path_factory):
    """Run every case once in one mode; returns (mode limits, world, results by name, listener)."""
    if request.param == "namespace" and isolation_mode("auto") != "namespace":
        pytest.skip("namespace isolation is unavailable on this machine")
    limits = SandboxLimits(mode=request.param, **LIMITS)
    folder = tmp_path_factory.mktemp(f"canary_{request.param}")
    folder.chmod(0o777)
    canary = folder / "canary.txt"
    canary.write_text("untouched")
    canary.chmod(0o666)  # even a world-writable file must stay unchanged
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.setblocking(False)
    world = World(folder, canary, listener.getsockname()[1], os.getpid())
    os.environ["POLO_HOSTILE_SECRET"] = SECRET
    try:
        programs = [Program(case.source, call_args(case, world)) for case in CASES]
        results = dict(zip((c.name for c in CASES), run_batch(programs, limits, concurrency=2)))
    finally:
        del os.environ["POLO_HOSTILE_SECRET"]
    yield limits, world, results, listener
    listener.close()


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 25 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_program_does_not_escape(corpus, case):
    limits, world, results, _ = corpus
    result = results[case.name]
    assert result.status in ("ok", "timeout", "limit", "crashed")
    assert result.passed(EXPECTED[: len(result.calls)]) == [False] * len(result.calls)
    case.check(result, world, limits)
    text = json.dumps([c.text for c in result.calls]) + result.stdout + result.stderr
    assert SECRET not in text and "untouched" not in text and "polo-secret" not in text
    assert REPO_FILE.read_text()[:200] not in text


def sandbox_processes() -> list[str]:
    """Processes of this test process's sandbox uids, and the fork server's children (job processes)."""
    uids = set(sandbox.SLOT_POOL.claimed())
    server = sandbox.SERVER.proc.pid if sandbox.SERVER.proc else None
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == server:
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid, ppid = int(fields["Uid"].split()[0]), int(fields["PPid"])
        if uid in uids or ppid == server:
            found.append(f"{entry.name}: uid {uid} {cmdline[:100]!r}")
    return found


def test_nothing_survives_or_changed(corpus):
    limits, world, results, listener = corpus
    assert sandbox_processes() == []
    assert world.canary.read_text() == "untouched" and oct(world.canary.stat().st_mode & 0o777) == oct(0o666)
    assert sorted(p.name for p in world.canary_dir.iterdir()) == ["canary.txt"]
    assert not Path("/tmp/polo-escape.txt").exists()
    with pytest.raises(BlockingIOError):
        listener.accept()  # no program reached the host's loopback
    assert {r.status for r in results.values()} <= {"ok", "timeout", "limit", "crashed"}
    leftover_daemons = results["double_forked_daemon"].leftover + results["daemon_heartbeat_on_stderr"].leftover
    if limits.mode == "namespace":
        assert leftover_daemons >= 2  # they started, and the supervisor killed them
