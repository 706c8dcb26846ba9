"""The sandbox's inner side: a fork server that runs each untrusted program under a supervisor, and reports.

Started once per process by ``polo.tasks.sandbox`` as ``python -I -S sandbox_harness.py serve FD`` (standard
library only: polo is not importable here). It receives jobs on the socket FD (``SOCK_SEQPACKET``): the path of a
job file (JSON, written by the parent, deleted here) with four pipe fds attached (stdout, stderr, result,
status). Per job it forks a child that starts a new session and, in mode ``namespace``, enters new PID, network
and mount namespaces (as an unprivileged user also a user namespace) and forks the supervisor as the namespace's
init; in mode ``subreaper`` the child is the supervisor, a child subreaper. The supervisor forks the candidate,
which drops privileges and runs the program. Forking from this warm interpreter costs milliseconds where starting
a fresh one per program costs tens.

- the *result* fd, written by the candidate: one frame per event, a 4-byte big-endian length then a JSON
  array ``["start", i]``, ``["value", i, json_text]`` or ``["error", i, exception_type_name]``. The candidate
  can write anything there; the parent validates it and compares values with expected outputs it never sent.
- the *status* fd, closed in the candidate before untrusted code runs: the job process's pid and a newline
  first (the parent's handle for a last-resort kill), in subreaper mode the line ``guard LAYER...`` (the
  kernel guard's layers the candidate applied, polo/tasks/kernel_guard.py), then the supervisor's JSON object
  ``{"status", "exit", "signal", "cpu_s", "leftover"}``.

``python -I -S sandbox_harness.py reap UID`` kills every process of ``UID`` (the parent's last resort).
"""
import ctypes
import importlib.util
import json
import os
import resource
import signal
import struct
import sys
import time

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 24, 38, 36
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
DEVICES = ("null", "zero", "random", "urandom")
BLOCKED_EVENTS = ("socket.", "os.kill", "os.killpg", "signal.pthread_kill", "os.fork", "os.forkpty", "os.system",
                  "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "pty.spawn", "ctypes.", "os.unshare",
                  "os.setns")
"""Audit events refused in the candidate in subreaper mode (prefixes)."""
ONE, TWO = slice(0, 1), slice(0, 2)
PATH_EVENTS = {"os.remove": ONE, "os.rmdir": ONE, "os.mkdir": ONE, "os.chmod": ONE, "os.chown": ONE,
               "os.truncate": ONE, "os.utime": ONE, "os.listdir": ONE, "os.scandir": ONE, "shutil.rmtree": ONE,
               "os.rename": TWO, "os.link": TWO, "os.symlink": slice(1, 2)}
"""Audit events whose path arguments (these positions) must lie in the work directory (listings: in a
read-only root or the work directory)."""
BLOCKED_IMPORTS = ("_posixsubprocess",)
"""Modules the candidate may not import in subreaper mode (``_posixsubprocess`` starts processes unaudited)."""
PRELOAD = ("math", "itertools", "collections", "functools", "re", "string", "heapq", "bisect", "random", "socket",
           "threading")
"""Modules the server imports once, so every candidate starts with them loaded: in subreaper mode, where the
interpreter's directory may be unreadable to the sandbox uid (a Python installed in root's home), a program can
import only modules already loaded; these are the common ones and ``socket``, whose audit events the hooks
watch."""

libc = ctypes.CDLL(None, use_errno=True)


def load_kernel_guard():
    """polo/tasks/kernel_guard.py, loaded by its path (polo is not importable here)."""
    spec = importlib.util.spec_from_file_location(
        "polo_kernel_guard", os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_guard.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kernel_guard = load_kernel_guard()


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    check(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def build_root(root, job):
    """Mount a new root filesystem on ``root`` and chroot into it: read-only binds of the system and Python
    directories (``job["binds"]``), the four character devices, a fresh ``/proc`` of this PID namespace (each
    user sees only its own processes there) and ``/work``, a tmpfs owned by the sandbox uid, as the only
    writable place."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=755")
    for path in job["binds"]:
        target = root + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.symlink(os.readlink(path), target)
            continue
        os.makedirs(target, exist_ok=True)
        mount(path, target, None, MS_BIND)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(root + "/dev")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    os.makedirs(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    os.makedirs(root + "/work")
    owner = f",uid={job['uid']},gid={job['gid']}" if job["uid"] is not None else ""
    mount("tmpfs", root + "/work", "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={job['limits']['workdir_bytes']},mode=700{owner}")
    os.chroot(root)
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def descendants():
    """PIDs of this process's descendants, from /proc (a subreaper inherits the orphans of its subtree)."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    parent_of[int(entry)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass  # exited meanwhile
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent_of.items() if ppid in frontier} - found
        found |= frontier
    return found


def kill_everything(namespace):
    """SIGKILL every process left and reap them; how many there were. The namespace's init reaches every
    process of its PID namespace with kill(-1); a subreaper kills its subtree (children forked meanwhile are
    orphaned to it, so the next scan finds them). Done when this process has no child left: any descendant
    would have an ancestor among its children."""
    killed = 0
    for _ in range(10000):
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                killed += 1
        except ChildProcessError:
            return killed
        for pid in [-1] if namespace else descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)
    return killed


def set_limits(limits):
    """Kernel resource limits of the candidate (inherited by everything it starts)."""
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    for which, key in ((resource.RLIMIT_AS, "memory_bytes"), (resource.RLIMIT_FSIZE, "file_size_bytes"),
                       (resource.RLIMIT_NPROC, "processes"), (resource.RLIMIT_NOFILE, "open_files")):
        resource.setrlimit(which, (limits[key], limits[key]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def drop_privileges(uid, gid):
    """Become ``uid``/``gid`` (when started as root; this clears every capability), or, as an unprivileged
    user inside a user namespace (uid 0 there), give up every capability for good."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError("could not drop privileges")
    elif os.geteuid() == 0:  # root of a user namespace we own: drop the bounding set, then every capability
        for cap in range(64):
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        header = struct.pack("II", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        check(libc.capset(header, bytes(24)), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def audit_hook(work, read_roots, limits):
    """Refuse process creation, signals, sockets and ctypes, writes outside ``work``, reads outside ``work`` and
    ``read_roots``, and more than ``workdir_bytes // file_size_bytes`` opens for writing (each file is capped at
    ``file_size_bytes``, so the directory stays within ``workdir_bytes``). Defense in depth for subreaper mode:
    bypassable (a program can patch the harness's globals or the hook's closure), not a boundary: the kernel
    guard (Landlock, seccomp) is."""
    realpath, fspath = os.path.realpath, os.fspath
    write_opens = [limits["workdir_bytes"] // max(1, limits["file_size_bytes"])]

    def inside(path, roots):
        if isinstance(path, int) or path is None:
            return True
        path = realpath(fspath(path).decode() if isinstance(fspath(path), bytes) else fspath(path))
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)

    writable, readable = (work,), (work, *read_roots)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def hook(event, args):
        if event.startswith(BLOCKED_EVENTS) or event == "import" and args[0] in BLOCKED_IMPORTS:
            raise PermissionError(f"sandbox: {event} {args[0] if event == 'import' else ''}is not allowed")
        if event == "open":
            path, mode, flags = args
            writing = (mode is not None and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & write_flags)
            if not inside(path, writable if writing else readable):
                raise PermissionError(f"sandbox: opening {path!r} is not allowed")
            if writing and not isinstance(path, int):
                if write_opens[0] <= 0:
                    raise PermissionError("sandbox: the work directory's budget of files to write is used up")
                write_opens[0] -= 1
        elif event in PATH_EVENTS:
            roots = readable if event in ("os.listdir", "os.scandir") else writable
            paths = args[PATH_EVENTS[event]]
            if not all(inside(p, roots) for p in paths if isinstance(p, (str, bytes, os.PathLike))):
                raise PermissionError(f"sandbox: {event} outside the work directory is not allowed")

    sys.addaudithook(hook)


def frame(fd, *items):
    data = json.dumps(items).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def run_candidate(job, result_fd):
    """Define the program, call its function on each argument tuple, report each outcome on ``result_fd``."""
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
    try:
        exec(compile(job["source"], "<candidate>", "exec"), namespace)
        function = namespace[job["function"]]
        setup_error = None
    except BaseException as err:  # noqa: B036  (the candidate's exit or interrupt is its failure)
        setup_error = type(err).__name__
    value_cap = job["limits"]["value_bytes"]
    for i, args in enumerate(job["calls"]):
        if setup_error is not None:
            frame(result_fd, "error", i, setup_error)
            continue
        frame(result_fd, "start", i)
        try:
            text = json.dumps(function(*args), allow_nan=False)
            outcome = ("value", i, text) if len(text) <= value_cap else ("error", i, "ValueTooLarge")
        except BaseException as err:  # noqa: B036
            outcome = ("error", i, type(err).__name__)
        frame(result_fd, *outcome)


def candidate(job, mode, work):
    """The child: stdin from /dev/null, only the result fd and stdio open, limits, privileges dropped, in
    subreaper mode the kernel guard's layers (``job["guard"]``, each applied or the program does not run;
    reported on the status fd as ``guard LAYER...``) and the audit hook, then the program. Never returns."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        low, high = sorted((job["result_fd"], job["status_fd"]))
        for start, stop in ((3, low), (low + 1, high), (high + 1, 1 << 16)):
            os.closerange(start, stop)
        os.chdir(work)
        set_limits(job["limits"])
        drop_privileges(job["uid"], job["gid"])
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        if mode == "subreaper":
            layers = kernel_guard.apply(job["guard"], job["read_roots"], [work, *job["devices"]])
            os.write(job["status_fd"], f"guard {' '.join(layers)}\n".encode())
            audit_hook(work, job["read_roots"], job["limits"])
        os.close(job["status_fd"])
        os.environ.clear()
    except BaseException as err:  # noqa: B036
        os.write(2, f"sandbox: candidate setup failed: {err!r}\n".encode())
        os._exit(125)
    die, code = os._exit, 1  # bound before the program runs: patching os._exit cannot bring it back here
    try:
        run_candidate(job, job["result_fd"])
        sys.stdout.flush()
        sys.stderr.flush()
        code = 0
    finally:
        die(code)


def supervise(job):
    """Fork the candidate, wait for it until the deadline, kill whatever is left, report on the status fd."""
    mode, root = job["mode"], job["root"]
    namespace = mode == "namespace"
    if namespace:
        build_root(root, job)
        work = "/work"
    else:
        check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
        work = root + "/work"
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    deadline = time.monotonic() + job["limits"]["timeout_s"]
    pid = os.fork()
    if pid == 0:
        candidate(job, mode, work)
    os.close(job["result_fd"])
    timed_out, code, sig = False, None, None
    while True:
        done, wait_status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            _, wait_status, usage = os.wait4(pid, 0)
            timed_out = True
            break
        signal.sigtimedwait({signal.SIGCHLD}, left)
    if timed_out:
        status = "timeout"
    elif os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        status = "limit" if sig in (signal.SIGXCPU, signal.SIGKILL, signal.SIGXFSZ) else "crashed"
    else:
        code = os.WEXITSTATUS(wait_status)
        status = "ok" if code == 0 else "crashed"
    leftover = kill_everything(namespace)
    report = {"status": status, "exit": code, "signal": sig, "leftover": leftover,
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 4)}
    os.write(job["status_fd"], json.dumps(report).encode())


def reap(uid):
    """Kill every process of ``uid`` (kill(-1) as that uid reaches exactly its processes), until none is left."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    for _ in range(10000):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.001)


def enter_namespaces():
    """New mount, network and PID namespaces (the PID one applies to the children); as an unprivileged user
    first a user namespace in which this user is root."""
    uid, gid = os.getuid(), os.getgid()
    user = CLONE_NEWUSER if os.geteuid() != 0 else 0
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | user), "unshare")
    if user:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)


def start_job(job_file, fds):
    """The forked child of the server: stdio on the job's pipes, its pid on the status fd, then the supervisor
    (in namespace mode: as the init of new namespaces, killed when this process dies). Never returns."""
    try:
        out, err, result_fd, status_fd = fds
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        os.write(status_fd, f"{os.getpid()}\n".encode())
        with open(job_file) as f:
            job = json.load(f)
        os.unlink(job_file)
        job["result_fd"], job["status_fd"] = result_fd, status_fd
        if job["mode"] == "namespace":
            enter_namespaces()
            pid = os.fork()
            if pid == 0:
                check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
                supervise(job)
                os._exit(0)
            os.close(result_fd)
            os.close(status_fd)
            os.waitpid(pid, 0)
        else:
            supervise(job)
    except BaseException as error:  # noqa: B036  (report and leave: never back into the server loop)
        os.write(2, f"sandbox: job failed: {error!r}\n".encode())
        os._exit(1)
    os._exit(0)


def serve(control_fd):
    """Fork one ``start_job`` per request on ``control_fd`` until the parent closes it."""
    for name in PRELOAD:
        __import__(name)
    kernel_guard.available_layers()  # probe Landlock's ABI and build the seccomp filter once, for every job
    kernel_guard.seccomp_program(0)
    import socket

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps finished jobs
    server = socket.socket(fileno=control_fd)
    while True:
        message, fds, _, _ = socket.recv_fds(server, 4096, 4)
        if not message:
            return
        if len(fds) == 4 and os.fork() == 0:
            server.close()
            start_job(message.decode(), fds)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] == "reap":
        reap(int(sys.argv[2]))
    else:
        serve(int(sys.argv[2]))
