"""The kernel guard (polo/tasks/kernel_guard.py): the seccomp program's decisions, checked by running it in a
small classic-BPF interpreter here, its syscall numbers against the kernel headers, the Landlock rights per ABI,
and both layers applied for real in a child process (which runs as this user: no uid drop helps it)."""
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from polo.tasks import kernel_guard as kg

HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
AUDIT_ARCH_I386 = 3 | 0x40000000  # EM_386 | __AUDIT_ARCH_LE
ALLOW, EPERM, ENOSYS = kg.SECCOMP_RET_ALLOW, kg.SECCOMP_RET_ERRNO | 1, kg.SECCOMP_RET_ERRNO | 38


def run_bpf(program, nr: int, args=(), arch: int = kg.AUDIT_ARCH_X86_64) -> int:
    """What a classic-BPF seccomp program returns for one call (the instructions the guard uses)."""
    words = list(args) + [0] * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(w & (2**64 - 1) for w in words))
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == 0x20:
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def test_seccomp_program_decisions():
    pid = 4242
    program = kg.seccomp_program(pid)
    thread = 0x3D0F00  # glibc's pthread_create flags: CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|..TID
    cases = [
        (0, (), ALLOW), (1, (1,), ALLOW), (39, (), ALLOW), (53, (1, 1, 0), ALLOW),  # read, write, getpid, socketpair
        (59, (), EPERM), (322, (), EPERM), (57, (), EPERM), (58, (), EPERM), (41, (2, 1, 0), EPERM),
        (41, (1, 1, 0), EPERM), (101, (16, 1), EPERM), (310, (), EPERM), (425, (), EPERM), (272, (), EPERM),
        (90, (), EPERM), (280, (), EPERM), (188, (), EPERM),  # chmod, utimensat, setxattr
        (56, (thread,), ALLOW), (56, (0x11,), EPERM),  # clone: a thread; a fork (SIGCHLD)
        (56, (thread | 0x40000000,), EPERM), (56, (thread | 0x10000000,), EPERM),  # a thread in a new netns/userns
        (435, (), ENOSYS),  # clone3: glibc falls back to clone
        (62, (pid, 0), ALLOW), (62, (pid + 1, 9), EPERM), (62, (-1, 9), EPERM), (62, (0, 9), EPERM),
        (234, (pid, pid + 1, 10), ALLOW), (234, (1, 1, 9), EPERM), (200, (pid, 9), EPERM),
        (129, (pid, 10, 0), ALLOW), (297, (7, 7, 10, 0), EPERM),
        (0x40000000 | 39, (), EPERM), (0x40000000 | 57, (), EPERM),  # x32
    ]
    got = [(nr, args, run_bpf(program, nr, args)) for nr, args, _ in cases]
    assert got == cases
    for nr in (20, 2, 11, 102, 0):  # the i386 table (getpid, fork, execve, socketcall, restart): all refused
        assert run_bpf(program, nr, arch=AUDIT_ARCH_I386) == EPERM
    assert program[1] == (0x15, 0, program[1][2], 0xC000003E)  # the arch word: AUDIT_ARCH_X86_64


@pytest.mark.skipif(not HEADER.exists(), reason=f"{HEADER} is not installed")
def test_syscall_numbers_match_the_kernel_headers():
    table = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+) (\d+)", HEADER.read_text())}
    ours = {**kg.DENIED, **kg.SIGNALLING, "clone": kg.SYS_CLONE, "clone3": kg.SYS_CLONE3}
    known = {name: nr for name, nr in ours.items() if name in table}  # an older header lacks the newest calls
    assert len(known) >= len(ours) - 4 and known == {name: table[name] for name in known}


def test_landlock_rights_follow_the_abi():
    assert kg.handled_rights(1) == ((1 << 13) - 1, 0, 0)
    assert kg.handled_rights(3) == ((1 << 15) - 1, 0, 0)  # refer (2) and truncate (3)
    assert kg.handled_rights(4) == ((1 << 15) - 1, 3, 0)  # TCP bind and connect
    assert kg.handled_rights(7) == ((1 << 16) - 1, 3, 3)  # ioctl on devices (5); scoped sockets and signals (6)


def test_apply_rejects_unknown_layers():
    with pytest.raises(ValueError, match="unknown layers"):
        kg.apply(["apparmor"], [], [])


CHILD = r"""
import ctypes, importlib.util, json, os, socket, sys, threading
spec = importlib.util.spec_from_file_location("guard", sys.argv[1])
guard = importlib.util.module_from_spec(spec)
spec.loader.exec_module(guard)
work, outside, secret, shared = sys.argv[2:6]
layers = guard.apply(guard.available_layers(), [sys.base_prefix, sys.prefix, "/usr", "/lib", "/lib64", shared],
                     [work])
def i386_getpid():
    libc = ctypes.CDLL(None)
    libc.mmap.restype = ctypes.c_void_p
    page = libc.mmap(None, 4096, 7, 0x22, -1, 0)
    ctypes.memmove(page, b"\xb8\x14\x00\x00\x00\xcd\x80\xc3", 8)
    return ctypes.CFUNCTYPE(ctypes.c_int)(page)()
attempts = {
    "write inside": lambda: open(os.path.join(work, "ok.txt"), "w").write("x"),
    "write outside": lambda: open(os.path.join(outside, "escaped.txt"), "w").write("x"),
    "read outside": lambda: open(secret).read(),
    "read a readable path": lambda: open(os.path.join(shared, "data.txt")).read(),
    "write a readable path": lambda: open(os.path.join(shared, "data.txt"), "a").write("x"),
    "create in a readable path": lambda: open(os.path.join(shared, "new.txt"), "w").write("x"),
    "read /proc": lambda: open("/proc/self/environ").read(),
    "thread": lambda: threading.Thread(target=int).start(),
    "fork": os.fork,
    "exec": lambda: os.execv("/bin/true", ["true"]),
    "socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    "socketpair": lambda: socket.socketpair() and None,
    "signal the parent": lambda: os.kill(os.getppid(), 0),
    "signal itself": lambda: os.kill(os.getpid(), 0),
    "i386 getpid": lambda: i386_getpid() > 0 or 1 / 0,
}
out = {}
for name, attempt in attempts.items():
    try:
        attempt()
        out[name] = "ok"
    except ZeroDivisionError:
        out[name] = "refused"
    except OSError as err:
        out[name] = os.strerror(err.errno)
print(json.dumps({"layers": layers, "outcomes": out}))
"""


@pytest.mark.skipif(kg.available_layers() != ("landlock", "seccomp"), reason="Landlock or seccomp is unavailable")
def test_both_layers_confine_a_real_process(tmp_path):
    work, outside, shared = tmp_path / "work", tmp_path / "outside", tmp_path / "shared"
    for folder in (work, outside, shared):
        folder.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("secret")
    (shared / "data.txt").write_text("data")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", CHILD, kg.__file__, str(work), str(outside),
                           str(secret), str(shared)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    denied, refused = os.strerror(13), os.strerror(1)  # EACCES: Landlock; EPERM: the seccomp filter
    assert report == {"layers": ["landlock", "seccomp"], "outcomes": {
        "write inside": "ok", "write outside": denied, "read outside": denied, "read a readable path": "ok",
        "write a readable path": denied, "create in a readable path": denied, "read /proc": denied,
        "thread": "ok", "fork": refused, "exec": refused, "socket": refused, "socketpair": "ok",
        "signal the parent": refused, "signal itself": "ok", "i386 getpid": "refused"}}
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"] and (work / "ok.txt").exists()
    assert sorted(p.name for p in shared.iterdir()) == ["data.txt"] and (shared / "data.txt").read_text() == "data"
