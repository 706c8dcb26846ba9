"""The hostile-program corpus, an acceptance gate: programs that try to escape the sandbox, starve the host,
outlive their run, read secrets or forge their test results, each run in every isolation mode available here.

Each case asserts its own "no escape" condition; the corpus runs concurrently (two at a time, so programs also
run beside each other's attacks), and afterwards ``test_nothing_survives_or_changed`` asserts that no process of
the corpus is left, the canary files are unchanged, the listening sockets (TCP, UDP, a UNIX socket on a path
and an abstract one) saw nothing and the secret environment variable appears in no output. ``HARNESS_CASES``
attack the harness itself: each first disarms subreaper mode's audit hook (the way the reviewer did, by its
closure, or by its globals, its code, ``gc`` or frame walking) and asserts, in that mode, that it succeeded, so
only the kernel guard (Landlock, seccomp) stands in the way. Limits are small (1.5 s wall clock, 1 CPU second)
to keep the run short. ``EXPECTED`` holds the hidden tests' outputs: random numbers that no program is ever
shown. ``run_corpus`` and ``escapes`` also serve bench/sandbox.py (``--hostile``).
"""
import json
import os
import random
import shutil
import socket
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from polo.tasks import kernel_guard, sandbox
from polo.tasks.sandbox import Program, SandboxLimits, SandboxResult, run_batch, unavailable

LIMITS = {"timeout_s": 1.5, "cpu_seconds": 1, "memory_mb": 256, "file_size_kb": 256, "workdir_mb": 2,
          "processes": 8, "open_files": 32, "output_bytes": 1024, "value_bytes": 4096}
SECRET = f"polo-secret-{random.SystemRandom().getrandbits(64):x}"
EXPECTED = [random.SystemRandom().randrange(10**8, 10**9) for _ in range(3)]
REPO_FILE = Path(__file__).resolve()
README = REPO_FILE.parents[2] / "README.md"


@dataclass
class World:
    """What the tests set up around the corpus: the canary folder, the listening socket, this process."""

    canary_dir: Path
    canary: Path
    port: int
    pid: int
    udp_port: int
    unix_path: str
    abstract: str

    def args(self) -> list:
        return [str(self.canary), self.port, self.pid, str(REPO_FILE), self.udp_port, self.unix_path, self.abstract]


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


HEAD = "def f(canary, port, pid, repo, udp, unix, abstract):\n"
"""The attacks' signature: the world's paths, ports and pids (``World.args``)."""


def attempts(*lines: str) -> str:
    """A program that tries each line and returns the outcome of each (the error's name or ``"ok"``)."""
    body = "".join(f"    try:\n        {line}\n        out.append('ok')\n    except BaseException as e:\n"
                   f"        out.append(type(e).__name__)\n" for line in lines)
    return f"import os, socket, signal, sys\n{HEAD}    out = []\n{body}    return out\n"


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


DISARM = src('''
    import ctypes, gc, os, signal, socket, struct, sys, types

    def harness():
        return sys.modules['__main__']

    def hooks():
        return [o for o in gc.get_objects() if isinstance(o, types.FunctionType) and o.__name__ == 'hook'
                and o.__code__.co_filename.endswith('sandbox_harness.py')]

    def candidate_frame():
        frame = sys._getframe()
        while frame is not None and frame.f_code.co_name != 'candidate':
            frame = frame.f_back
        return frame

    def job():
        return candidate_frame().f_locals['job']

    def neuter(hook):
        for cell in hook.__closure__:
            value = cell.cell_contents
            if callable(value):
                cell.cell_contents = lambda *a, **k: True
            elif isinstance(value, tuple):
                cell.cell_contents = ('/',)
            elif isinstance(value, list):
                cell.cell_contents = [10 ** 9]
        hook.__globals__.update(BLOCKED_EVENTS=('never.',), BLOCKED_IMPORTS=(), PATH_EVENTS={})

    def disarm(how):
        """Put subreaper mode's audit hook out of the way; how many hooks were patched."""
        if how == 'globals':  # the harness module's tables, through sys.modules
            found = hooks()
            if found:
                harness().__dict__.update(BLOCKED_EVENTS=('never.',), BLOCKED_IMPORTS=(), PATH_EVENTS={})
            return len(found)
        if how == 'closure':  # the reviewer's escape: rewrite the hook's closure cells
            found = hooks()
        elif how == 'referrers':  # the functions that refer to the harness's globals
            found = [o for o in gc.get_referrers(vars(harness()))
                     if isinstance(o, types.FunctionType) and o.__name__ == 'hook']
        elif how == 'frame':  # walk the stack to the harness's frame, then to the hook through its globals
            found = [o for o in gc.get_referrers(candidate_frame().f_globals)
                     if isinstance(o, types.FunctionType) and o.__name__ == 'hook']
        elif how == 'code':  # give the hook a body that does nothing (same free variables)
            found = hooks()
            for hook in found:
                names = hook.__code__.co_freevars
                text = (f"def outer({', '.join(names)}):\\n    def hook(event, args):\\n"
                        f"        {'; '.join(names) or 'pass'}\\n    return hook\\n")
                scope = {}
                exec(text, scope)
                hook.__code__ = scope['outer'](*names).__code__
            return len(found)
        for hook in found:
            neuter(hook)
        return len(found)

    def sockaddr(port):
        return struct.pack('<H', 2) + struct.pack('>H', port) + bytes([127, 0, 0, 1]) + bytes(8)

    def int80_getpid():
        """getpid through the i386 entry (int 0x80), from a page of machine code."""
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        page = libc.mmap(None, 4096, 7, 0x22, -1, 0)
        ctypes.memmove(page, b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3', 8)  # mov eax, 20; int 0x80; ret
        return ctypes.CFUNCTYPE(ctypes.c_int)(page)()
    ''')
PLACES = ("    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(repo))), 'README.md')\n"
          "    outside = os.path.dirname(canary)\n    libc = ctypes.CDLL(None)\n")


def tries(lines: tuple[str, ...], indent: str = "    ") -> str:
    return "".join(f"{indent}try:\n{indent}    {line}\n{indent}    out.append('ok')\n"
                   f"{indent}except BaseException as e:\n{indent}    out.append(type(e).__name__)\n" for line in lines)


def attack(how: str, *lines: str) -> str:
    """A program that disarms the audit hook (``how``), then tries each line: returns ``[disarmed, outcomes]``."""
    return (DISARM + HEAD + f"    try:\n        disarmed = disarm({how!r}) > 0\n    except BaseException as e:\n"
            "        disarmed = type(e).__name__\n" + PLACES + "    out = []\n" + tries(lines)
            + "    return [disarmed, out]\n")


def disarmed_then_refused(result, world, limits):
    """The hook was out of the way (subreaper mode), and still every attempt failed."""
    disarmed, outcomes = value(result)
    assert disarmed is True or limits.mode != "subreaper", disarmed
    assert outcomes and "ok" not in outcomes, outcomes


def refused_in_subreaper(result, world, limits):
    """Process starts and kernel interfaces that namespace mode allows inside its namespaces (the shared checks
    decide there); subreaper mode refuses them."""
    if limits.mode == "subreaper":
        disarmed_then_refused(result, world, limits)


def only_the_result_pipe(result, world, limits):
    disarmed, open_fds = value(result)
    assert disarmed is True or limits.mode != "subreaper", disarmed
    assert len(open_fds) <= 1, open_fds  # stdio and the result pipe: the status pipe and the server's are closed


def supervisor_has_the_last_word(result, world, limits):
    assert result.status == "crashed" and result.exit == 3, result  # not the forged {"status": "ok"}


WRITE_OUTSIDE = "open(os.path.join(outside, 'escaped.txt'), 'w').write('x')"
READ_README = "assert open(readme).read()"
TCP = "s = socket.socket(); s.settimeout(0.5); s.connect(('127.0.0.1', port))"  # no name lookup on the way
UDP = "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'pwned', ('127.0.0.1', udp))"
HARNESS_CASES = [
    Hostile("reviewer_escape", attack(
        "closure", WRITE_OUTSIDE, "open('/tmp/polo-escape.txt', 'w').write('x')", "open(canary, 'a').write('pwned')",
        READ_README, "assert open(repo).read()"), disarmed_then_refused),
    Hostile("hook_globals_then_network", attack(
        "globals", TCP, UDP, "socket.socket(socket.AF_UNIX).connect(unix)",
        "socket.socket(socket.AF_UNIX).connect(abstract)",
        "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b'x', ('::1', udp))"), disarmed_then_refused),
    Hostile("hook_code_replaced", attack(
        "code", WRITE_OUTSIDE, "os.listdir(os.path.dirname(repo))", READ_README, "os.remove(canary)"),
        disarmed_then_refused),
    Hostile("hook_found_by_gc_referrers", attack(
        "referrers", "os.link(canary, 'hard'); open('hard', 'a').write('pwned')", "os.rename(canary, 'moved')",
        "os.symlink(canary, 'soft'); open('soft', 'a').write('pwned')", "os.truncate(canary, 0)"),
        disarmed_then_refused),
    Hostile("frame_walk_to_the_job", attack(
        "frame", "os.write(job()['status_fd'], b'{\"status\": \"ok\", \"exit\": 0}')",
        "open(os.path.join(job()['root'], 'escape.txt'), 'w').write('x')", "os.listdir(job()['root'])",
        "open(os.path.join(job()['root'], 'job.json')).read()"), disarmed_then_refused),
    Hostile("harness_libc_after_disarm", attack(
        "globals", "assert harness().libc.system(f'echo pwned > {outside}/system.txt'.encode()) == 0",
        "assert harness().libc.setuid(0) == 0", "assert harness().libc.kill(pid, 0) == 0",
        "assert harness().libc.unshare(0x10000000) == 0"), disarmed_then_refused),
    Hostile("raw_syscalls_through_ctypes", attack(
        "closure", "import importlib; importlib.import_module('_ctypes'); "
        "assert libc.open(os.path.join(outside, 'raw.txt').encode(), 0o101, 0o644) >= 0",
        "assert libc.syscall(2, readme.encode(), 0) >= 0",
        "s = libc.socket(2, 1, 0); assert s >= 0 and libc.connect(s, sockaddr(port), 16) == 0",
        "s = libc.socket(2, 2, 0); assert s >= 0 and libc.sendto(s, b'pwned', 5, 0, sockaddr(udp), 16) == 5"),
        disarmed_then_refused),
    Hostile("process_start_after_disarm", attack(
        "globals", "import posix; p = posix.fork(); posix._exit(0) if p == 0 else posix.waitpid(p, 0)",
        "r = libc.syscall(57); os._exit(0) if r == 0 else None; assert r > 0",
        "os.posix_spawn('/bin/sh', ['sh', '-c', f'echo pwned > {outside}/spawn.txt'], {})",
        "import subprocess; subprocess.run(['/bin/true'], check=True)",
        "os.execv('/bin/sh', ['sh', '-c', f'echo pwned > {outside}/exec.txt'])"), refused_in_subreaper),
    Hostile("inherited_descriptors", DISARM + src('''
        def f(*args):
            disarmed = disarm('closure') > 0
            open_fds = []
            for fd in range(3, 1024):
                try:
                    os.fstat(fd)
                    open_fds.append(fd)
                except OSError:
                    pass
            return [disarmed, open_fds]
        '''), only_the_result_pipe),
    Hostile("forge_the_supervisor_report", DISARM + src('''
        import json
        def f(*args):
            disarm('closure')
            report = json.dumps({'status': 'ok', 'exit': 0, 'signal': None, 'leftover': 0, 'cpu_s': 0}).encode()
            fds = [job()['status_fd']] + [fd for fd in range(3, 256)]
            for fd in fds:
                try:
                    os.write(fd, b'1\\n' + report)
                except OSError:
                    pass
            os._exit(3)
        '''), supervisor_has_the_last_word),
    Hostile("proc_self_after_disarm", attack(
        "closure", "open('/proc/self/root' + readme).read()", "open(f'/proc/{os.getppid()}/root' + readme).read()",
        "open('/proc/1/root' + readme).read()", "open('/proc/self/cwd/../escape.txt', 'w').write('x')",
        "open('/proc/self/root/tmp/polo-escape.txt', 'w').write('x')"), disarmed_then_refused),
    Hostile("proc_environ_after_disarm", DISARM + src('''
        def f(*args):
            seen = [disarm('closure')]
            for path in ['/proc/self/environ', f'/proc/{os.getppid()}/environ', '/proc/1/environ',
                         f'/proc/{args[2]}/environ']:
                try:
                    seen.append(open(path, 'rb').read().decode(errors='replace'))
                except BaseException as e:
                    seen.append(type(e).__name__)
            return seen
        '''), shared_checks_only),
    Hostile("signals_after_disarm", attack(
        "globals", "os.kill(os.getppid(), signal.SIGKILL)", "os.kill(pid, 0)", "os.kill(1, 0)",
        "assert libc.syscall(234, pid, pid, 0) == 0", "assert libc.syscall(62, os.getppid(), 0) == 0"),
        both(disarmed_then_refused, supervisor_reported)),
    Hostile("unix_sockets_after_disarm", attack(
        "closure", "socket.socket(socket.AF_UNIX).connect(unix)", "socket.socket(socket.AF_UNIX).connect(abstract)",
        "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'x', unix)"), disarmed_then_refused),
    Hostile("udp_through_a_replaced_hook", attack(
        "code", UDP, "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('127.0.0.1', udp)); "
        "s.send(b'pwned')", TCP), disarmed_then_refused),
    Hostile("kernel_interfaces_after_disarm", attack(
        "globals", "assert libc.syscall(425, 8, ctypes.create_string_buffer(120)) >= 0",
        "assert libc.syscall(323, 0) >= 0", "assert libc.syscall(434, os.getpid(), 0) >= 0",
        "assert libc.syscall(250, 0, -3, 0) >= 0"), refused_in_subreaper),
    Hostile("trace_other_processes", attack(
        "globals", "assert libc.ptrace(16, os.getppid(), 0, 0) == 0", "assert libc.ptrace(0x4206, pid, 0, 0) == 0",
        "buf = ctypes.create_string_buffer(8); iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8); "
        "assert libc.process_vm_readv(os.getppid(), iov, 1, iov, 1, 0) == 8",
        "assert libc.syscall(438, libc.syscall(434, os.getppid(), 0), 4, 0) >= 0"), disarmed_then_refused),
    Hostile("i386_and_x32_syscalls", attack(
        "globals", "assert int80_getpid() > 0", "assert libc.syscall(0x40000000 | 39) > 0"), refused_in_subreaper),
    Hostile("escape_from_a_thread", DISARM + src(f'''
        import threading
        {HEAD.strip()}
            disarmed = disarm('closure') > 0
        ''') + PLACES + "    out = []\n    def attempts():\n" + tries(
        (WRITE_OUTSIDE, READ_README, TCP, UDP, "socket.socket(socket.AF_UNIX).connect(unix)"), "        ") + (
        "    thread = threading.Thread(target=attempts)\n    thread.start()\n    thread.join()\n"
        "    return [disarmed, out]\n"), disarmed_then_refused),
    Hostile("namespaces_and_mounts_after_disarm", attack(
        "globals", "assert libc.unshare(0x10000000) == 0", "assert libc.unshare(0x20000) == 0",
        "assert libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0", "assert libc.chroot(b'.') == 0",
        "assert libc.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY), 0) == 0"), disarmed_then_refused),
    Hostile("file_metadata_after_disarm", attack(
        "closure", "os.chmod(canary, 0o600)", "os.utime(canary, (0, 0))", "os.chown(canary, os.getuid(), -1)",
        "os.setxattr(canary, 'user.pwned', b'1')", "os.utime(canary)"), disarmed_then_refused),
]


def call_args(case: Hostile, world: World) -> tuple:
    """The calls of a case: the world's paths for attempt-style programs, markers for the 3-call ones."""
    if case.calls == 3:
        return ((0,), ("X",), (2,)) if case.name == "os_exit_in_the_middle" else ((0,), (1,), (2,))
    return (tuple(world.args()),)


CORPUS = CASES + HARNESS_CASES


@dataclass
class Listeners:
    """The host's sockets a program might reach: TCP, UDP, a UNIX socket on a path, an abstract one."""

    tcp: socket.socket
    udp: socket.socket
    unix: socket.socket
    abstract: socket.socket

    def reached(self) -> list[str]:
        """Which of them saw a connection or a datagram."""
        seen = []
        for name in ("tcp", "udp", "unix", "abstract"):
            try:
                getattr(self, name).accept() if name != "udp" else self.udp.recv(1)
                seen.append(name)
            except BlockingIOError:
                pass
        return seen

    def close(self) -> None:
        for s in (self.tcp, self.udp, self.unix, self.abstract):
            s.close()


def listen(kind: int, address, kind_type: int = socket.SOCK_STREAM) -> socket.socket:
    s = socket.socket(kind, kind_type)
    s.bind(address)
    if kind_type == socket.SOCK_STREAM:
        s.listen(16)
    s.setblocking(False)
    return s


def run_corpus(mode: str, folder: Path, cases: list[Hostile] = CORPUS):
    """Run ``cases`` once in ``mode`` around a fresh world in ``folder`` (made reachable to every uid, so that
    the sandbox uid's permissions do not hide what the isolation lets through): (limits, world, results by name,
    listeners, the canary's mtime)."""
    limits = SandboxLimits(mode=mode, **LIMITS)
    folder.chmod(0o711)
    canary_dir, sockets = folder / "canary", folder / "sockets"
    for d in (canary_dir, sockets):
        d.mkdir()
        d.chmod(0o777)
    canary = canary_dir / "canary.txt"
    canary.write_text("untouched")
    canary.chmod(0o666)  # even a world-writable file must stay unchanged
    tag = f"{os.getpid()}-{random.SystemRandom().getrandbits(32):x}"
    listeners = Listeners(listen(socket.AF_INET, ("127.0.0.1", 0)),
                          listen(socket.AF_INET, ("127.0.0.1", 0), socket.SOCK_DGRAM),
                          listen(socket.AF_UNIX, str(sockets / "host.sock")),
                          listen(socket.AF_UNIX, f"\0polo-hostile-{tag}"))
    (sockets / "host.sock").chmod(0o777)
    world = World(canary_dir, canary, listeners.tcp.getsockname()[1], os.getpid(),
                  listeners.udp.getsockname()[1], str(sockets / "host.sock"), f"\0polo-hostile-{tag}")
    mtime = canary.stat().st_mtime_ns
    os.environ["POLO_HOSTILE_SECRET"] = SECRET
    try:
        programs = [Program(case.source, call_args(case, world)) for case in cases]
        results = dict(zip((c.name for c in cases), run_batch(programs, limits, concurrency=2)))
    finally:
        del os.environ["POLO_HOSTILE_SECRET"]
    return limits, world, results, listeners, mtime


def check_case(case: Hostile, result: SandboxResult, world: World, limits: SandboxLimits) -> None:
    """Every case's conditions: a known status, hidden tests failed, its own check, no secret or repository
    text in anything that came back."""
    assert result.status in ("ok", "timeout", "limit", "crashed")
    assert result.passed(EXPECTED[: len(result.calls)]) == [False] * len(result.calls)
    case.check(result, world, limits)
    text = json.dumps([c.text for c in result.calls]) + result.stdout + result.stderr
    assert SECRET not in text and "untouched" not in text and "polo-secret" not in text
    assert REPO_FILE.read_text()[:200] not in text and README.read_text()[:200] not in text


def check_world(world: World, listeners: Listeners, mtime: int, results: dict[str, SandboxResult]) -> None:
    """After the corpus: no process left, the canary folder and file unchanged, no listener reached."""
    assert sandbox_processes() == []
    assert world.canary.read_text() == "untouched" and oct(world.canary.stat().st_mode & 0o777) == oct(0o666)
    assert world.canary.stat().st_mtime_ns == mtime and os.listxattr(world.canary) == []
    assert sorted(p.name for p in world.canary_dir.iterdir()) == ["canary.txt"]
    assert not Path("/tmp/polo-escape.txt").exists()
    assert listeners.reached() == []  # no program reached the host's sockets
    assert {r.status for r in results.values()} <= {"ok", "timeout", "limit", "crashed"}


def escapes(mode: str, folder: Path, cases: list[Hostile] = CORPUS) -> list[str]:
    """Run the corpus in ``mode`` and name each case whose conditions failed (``world``: the checks after
    the whole run failed)."""
    limits, world, results, listeners, mtime = run_corpus(mode, folder, cases)
    failed = []
    for case in cases:
        try:
            check_case(case, results[case.name], world, limits)
        except (AssertionError, OSError):  # a deleted canary is a failed condition too
            failed.append(case.name)
    try:
        check_world(world, listeners, mtime, results)
    except (AssertionError, OSError):
        failed.append("world")
    listeners.close()
    return failed


@pytest.fixture(scope="module", params=["namespace", "subreaper"])
def corpus(request):
    """Run every case once in one mode; returns (mode limits, world, results by name, listeners, mtime)."""
    why = unavailable(request.param)
    if why:
        pytest.skip(why)
    folder = Path(tempfile.mkdtemp(prefix=f"polo-hostile-{request.param}-"))  # /tmp is reachable to every uid
    try:
        limits, world, results, listeners, mtime = run_corpus(request.param, folder)
        yield limits, world, results, listeners, mtime
        listeners.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 25 and len(HARNESS_CASES) >= 15 and len({c.name for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_hostile_program_does_not_escape(corpus, case):
    limits, world, results, _, _ = corpus
    check_case(case, results[case.name], world, limits)


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
    limits, world, results, listeners, mtime = corpus
    check_world(world, listeners, mtime, results)
    leftover_daemons = results["double_forked_daemon"].leftover + results["daemon_heartbeat_on_stderr"].leftover
    if limits.mode == "namespace":
        assert leftover_daemons >= 2  # they started, and the supervisor killed them


def test_subreaper_mode_runs_every_program_under_the_kernel_guard(corpus):
    limits, _, results, _, _ = corpus
    expected = kernel_guard.available_layers() if limits.mode == "subreaper" else ()
    assert limits.mode == "namespace" or expected  # subreaper ran: the kernel offers a layer
    assert {name: r.guard for name, r in results.items() if r.guard != expected} == {}
