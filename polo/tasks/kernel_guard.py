"""Kernel-enforced confinement of the calling process, without privileges: Landlock and a seccomp filter.

The sandbox's ``subreaper`` mode applies both in the program's process, after the privilege drop and before any
untrusted code runs; both are inherited by every thread and cannot be lifted (a further ruleset or filter only
restricts more). Standard library only: ``sandbox_harness.py`` (which runs without polo on its path) loads this
file by its path.

- **Landlock** (Linux >= 5.13; ``restrict_files``): a ruleset that handles every file-system access right the
  running kernel's ABI knows (refer from ABI 2, truncate from 3, ioctl on devices from 5) and allows only
  read + execute beneath the given readable paths and everything beneath the writable ones; from ABI 4 it
  also handles TCP bind and connect with no port allowed, and from ABI 6 it scopes abstract UNIX sockets and
  signals to the process's own domain. Anything else (another directory, ``/proc``, the repository) is
  refused with ``EACCES`` by the kernel, whatever the program does in Python or through ``ctypes``.
- **seccomp** (x86-64 only; ``deny_syscalls``): ``no_new_privs`` then a classic-BPF filter that checks the
  architecture word (``AUDIT_ARCH_X86_64``: i386 calls through ``int 0x80`` and x32 calls are refused) and
  answers ``EPERM`` to process creation (``fork``, ``vfork``, ``execve``, ``execveat``, ``clone`` without
  ``CLONE_THREAD`` or with a namespace flag), sockets (``socket``: the result channel is a pipe;
  ``socketpair`` stays), other processes (``ptrace``, ``process_vm_*``, ``pidfd_*``, ``kcmp``,
  ``process_madvise``; ``kill``, ``tgkill`` and ``rt_(tg)sigqueueinfo`` unless aimed at the process itself,
  ``tkill``), ``io_uring`` (which could open sockets past the filter), namespaces and mounts, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, the key rings, ``open_by_handle_at``, and changes of file metadata
  (``chmod``, ``chown``, ``utime*``, ``*setxattr``, ``*removexattr``: Landlock does not govern them), in the work
  directory too; ``clone3`` gets ``ENOSYS``, so glibc falls back to ``clone`` (threads keep working).
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import stat
import struct
from collections.abc import Iterable, Sequence

LANDLOCK_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
"""``landlock_create_ruleset``, ``landlock_add_rule``, ``landlock_restrict_self`` (the generic syscall table)."""
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
"""The rights that apply to a file (a rule on a non-directory may grant only these)."""
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

PR_GET_SECCOMP, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 21, 22, 38
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
AUDIT_ARCH_X86_64 = 62 | 0x80000000 | 0x40000000  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
X32_SYSCALL_BIT = 0x40000000
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
"""CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (NEWTIME exists only for clone3)."""
SYS_CLONE, SYS_CLONE3 = 56, 435
DENIED = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "socket": 41, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440, "kcmp": 312,
    "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "tkill": 200,
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "keyctl": 250, "add_key": 248, "request_key": 249, "open_by_handle_at": 304,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "fchmodat2": 452, "chown": 92, "fchown": 93, "lchown": 94,
    "fchownat": 260, "utime": 132, "utimes": 235, "futimesat": 261, "utimensat": 280,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199, "removexattrat": 466,
}
"""x86-64 numbers (asm/unistd_64.h) of the calls the filter answers with ``EPERM``. The metadata calls (mode,
owner, times, extended attributes) are here because Landlock does not govern them: without this a program
could change them on any file its uid owns."""
SIGNALLING = {"kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}
"""Calls whose first argument is a target process: allowed only when it is the filtered process itself."""

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers to this process, 0 where there is none."""
    numbers = LANDLOCK_SYSCALLS.get(platform.machine())
    if numbers is None:
        return 0
    return max(0, _libc.syscall(numbers[0], None, ctypes.c_size_t(0), LANDLOCK_CREATE_RULESET_VERSION))


def seccomp_available() -> bool:
    """Whether this process may add a seccomp filter here (x86-64, a kernel built with seccomp filters)."""
    return platform.machine() == "x86_64" and _libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0) in (0, 2)


@functools.cache
def available_layers() -> tuple[str, ...]:
    """The layers this machine offers, probed once per process: ``landlock`` and/or ``seccomp``."""
    return tuple(name for name, ok in (("landlock", landlock_abi() > 0), ("seccomp", seccomp_available())) if ok)


def handled_rights(abi: int) -> tuple[int, int, int]:
    """The file-system rights, TCP rights and scopes a ruleset of Landlock ABI ``abi`` handles."""
    fs = (1 << 13) - 1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (
        FS_IOCTL_DEV if abi >= 5 else 0)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


def restrict_files(readable: Iterable[str], writable: Iterable[str]) -> int:
    """Landlock this process: read + execute beneath each existing path of ``readable``, every right beneath
    ``writable`` (on a file: read, write, truncate, device ioctl), nothing elsewhere, no TCP (ABI >= 4), signals
    and abstract sockets only within the domain (ABI >= 6). A readable path that is missing or that this
    process may not open is skipped (it could not read it anyway); a writable one must open. Returns the ABI."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(ctypes.get_errno() or EPERM, "Landlock is not available on this kernel")
    create, add_rule, restrict = LANDLOCK_SYSCALLS[platform.machine()]
    fs, net, scoped = handled_rights(abi)
    attr = struct.pack("<QQQ", fs, net, scoped)[: 8 if abi < 4 else 16 if abi < 6 else 24]
    ruleset = _libc.syscall(create, attr, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        rules = [(path, FS_EXECUTE | FS_READ_FILE | FS_READ_DIR, False) for path in readable]
        rules += [(path, fs, True) for path in writable]
        for path, rights, required in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                if required:
                    raise
                continue
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    rights &= FS_FILE_RIGHTS
                beneath = struct.pack("<Qi", rights & fs, fd)
                if _libc.syscall(add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, beneath, 0) != 0:
                    raise _fail(f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        no_new_privs()
        if _libc.syscall(restrict, ruleset, 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def no_new_privs() -> None:
    """Set ``no_new_privs`` (required to add a Landlock domain or seccomp filter without CAP_SYS_ADMIN)."""
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


def _ld(offset: int) -> tuple:
    return 0x20, 0, 0, offset  # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset of seccomp_data


def _jump(op: int, k: int, true: int | str, false: int | str) -> tuple:
    return op, true, false, k


def _ret(value: int) -> tuple:
    return 0x06, 0, 0, value  # BPF_RET | BPF_K


JEQ, JGE, JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_JEQ / BPF_JGE / BPF_JSET, with a constant
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data: nr, arch, the low word of args[0] (little-endian)


def seccomp_program(pid: int) -> list[tuple[int, int, int, int]]:
    """The filter for process ``pid``, as ``(code, jt, jf, k)`` instructions (see the module docstring)."""
    code, at = _template()
    op, true, false, _ = code[at]
    return [*code[:at], (op, true, false, pid), *code[at + 1:]]


@functools.cache
def _template() -> tuple[list[tuple[int, int, int, int]], int]:
    """The filter with its one per-process constant (the pid signals may target) left 0, and that
    instruction's index: built once (the sandbox's fork server warms it), copied per program."""
    code: list[tuple] = [_ld(ARCH), _jump(JEQ, AUDIT_ARCH_X86_64, 0, "deny"),
                         _ld(NR), _jump(JGE, X32_SYSCALL_BIT, "deny", 0)]
    code += [_jump(JEQ, nr, "deny", 0) for nr in sorted(DENIED.values())]
    code += [_jump(JEQ, SYS_CLONE3, "nosys", 0), _jump(JEQ, SYS_CLONE, "clone", 0)]
    code += [_jump(JEQ, nr, "target", 0) for nr in sorted(SIGNALLING.values())]
    code.append(_ret(SECCOMP_RET_ALLOW))
    labels = {"clone": len(code)}
    code += [_ld(ARG0), _jump(JSET, CLONE_THREAD, 0, "deny"), _jump(JSET, CLONE_NAMESPACES, "deny", "allow")]
    labels["target"] = len(code)
    code += [_ld(ARG0), _jump(JEQ, 0, "allow", "deny")]
    labels["allow"] = len(code)
    code.append(_ret(SECCOMP_RET_ALLOW))
    labels["deny"] = len(code)
    code.append(_ret(SECCOMP_RET_ERRNO | EPERM))
    labels["nosys"] = len(code)
    code.append(_ret(SECCOMP_RET_ERRNO | ENOSYS))
    resolved = []
    for i, (op, true, false, k) in enumerate(code):
        true, false = (labels[t] - i - 1 if isinstance(t, str) else t for t in (true, false))
        if not (0 <= true <= 255 and 0 <= false <= 255):
            raise ValueError(f"seccomp program: jump at {i} out of range")
        resolved.append((op, true, false, k))
    return resolved, labels["target"] + 1


def deny_syscalls(pid: int | None = None) -> None:
    """Install the seccomp filter on this process (``pid``: its own pid, the only target its signals may
    have; default ``os.getpid()``). Raises OSError where seccomp is unavailable."""
    if platform.machine() != "x86_64":
        raise OSError(ENOSYS, f"the seccomp filter is written for x86-64, not {platform.machine()}")
    program = seccomp_program(os.getpid() if pid is None else pid)
    raw = ctypes.create_string_buffer(b"".join(struct.pack("<HBBI", *ins) for ins in program))
    fprog = struct.pack("<HxxxxxxQ", len(program), ctypes.addressof(raw))  # struct sock_fprog
    no_new_privs()
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        raise _fail("prctl(PR_SET_SECCOMP)")


def apply(layers: Sequence[str], readable: Iterable[str], writable: Iterable[str]) -> tuple[str, ...]:
    """Apply each of ``layers`` (``landlock``, ``seccomp``) to this process, Landlock first (opening its rule
    paths needs no call the filter refuses); returns them. Raises OSError when one cannot be applied."""
    unknown = set(layers) - {"landlock", "seccomp"}
    if unknown:
        raise ValueError(f"kernel guard: unknown layers {sorted(unknown)}; expected landlock and/or seccomp")
    if "landlock" in layers:
        restrict_files(readable, writable)
    if "seccomp" in layers:
        deny_syscalls()
    return tuple(name for name in ("landlock", "seccomp") if name in layers)
