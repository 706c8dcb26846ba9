"""The code sandbox: values and errors come back per call, each limit is enforced, timeouts kill, the result
stream is validated, results are compared here and cached. Every isolation test runs in both modes (namespace
mode only where this machine supports it)."""
import json
import os
import signal
import struct

import pytest

from polo.core.registry import ConfigError
from polo.tasks import kernel_guard, sandbox
from polo.tasks.sandbox import (
    CallOutcome,
    ProgramTests,
    ResultCache,
    SandboxLimits,
    check_programs,
    isolation_mode,
    parse_frames,
    run_batch,
    run_program,
    run_tests,
    unavailable,
)

SMALL = {"timeout_s": 3.0, "cpu_seconds": 1, "memory_mb": 256, "file_size_kb": 64, "processes": 8,
         "open_files": 16, "output_bytes": 256}
MODES = ["namespace", "subreaper"]


@pytest.fixture(params=MODES)
def limits(request):
    why = unavailable(request.param)
    if why:
        pytest.skip(why)
    return SandboxLimits(mode=request.param, **SMALL)


def run(source, limits, calls=((),)):
    return run_program(source, calls, limits)


def test_values_errors_and_comparison_here(limits):
    source = "def f(x):\n    return {'a': [x, x * 2]} if x > 1 else 10 // x\n"
    result = run(source, limits, [(0,), (1,), (3,), ("s",)])
    assert result.status == "ok" and result.mode == limits.mode
    assert [c.kind for c in result.calls] == ["error", "value", "value", "error"]
    assert result.calls[0].text == "ZeroDivisionError" and result.calls[3].text == "TypeError"
    assert json.loads(result.calls[2].text) == {"a": [3, 6]}
    assert result.passed([0, 10, {"a": [3, 6]}, None]) == [False, True, True, False]
    # canonical JSON: a bool is not an int, a float is not an int, a tuple is the list of its items
    assert not CallOutcome("value", "true").matches(1) and not CallOutcome("value", "1.0").matches(1)
    assert CallOutcome("value", "[1, 2]").matches((1, 2)) and not CallOutcome("error", "1").matches(1)
    assert run_tests("def f(a, b): return a + b", [((1, 2), 3), ((2, 2), 5)], limits) == [True, False]


def test_values_up_to_the_cap_come_back_whatever_their_characters(limits):
    text = '\\"' * 16000  # 32000 characters; its JSON text, 64002, escapes to about 128000 inside the frame
    result = run("def f(n):\n    return '\\\\\"' * n\n", limits, [(16000,), (16400,)])
    assert result.calls[0].matches(text) and result.calls[1] == CallOutcome("error", "ValueTooLarge")
    assert result.detail == ""


def test_definition_errors_fail_every_call(limits):
    for source, name in [("def f(:", "SyntaxError"), ("import sys\nsys.exit(0)", "SystemExit"),
                         ("g = 1", "KeyError")]:
        result = run(source, limits, [(1,), (2,)])
        assert [c.text for c in result.calls] == [name, name] and result.status == "ok"


def test_isolated_interpreter_scrubbed_environment_fresh_directory(limits, monkeypatch):
    monkeypatch.setenv("POLO_TEST_SECRET", "s3cr3t")
    source = ("import os, sys\n"
              "def f():\n"
              "    return [dict(os.environ), sys.flags.isolated, sys.flags.no_site, os.getcwd(), os.listdir('.'),\n"
              "            os.getuid(), os.getgid(), os.getgroups()]\n")
    result = run(source, limits)
    env, isolated, no_site, cwd, listing, uid, gid, groups = json.loads(result.calls[0].text)
    assert env == {} and isolated == 1 and no_site == 1 and listing == []
    if os.geteuid() == 0:
        assert uid >= sandbox.UID_BASE and gid == uid and groups == []
    if limits.mode == "subreaper":
        assert not os.path.exists(cwd)  # the temporary directory is deleted afterwards
    else:
        assert cwd == "/work"


def test_rlimits_are_set(limits):
    source = ("import resource\n"
              "def f(name):\n"
              "    return list(resource.getrlimit(getattr(resource, name)))\n")
    names = ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CORE"]
    got = [json.loads(c.text) for c in run(source, limits, [(n,) for n in names]).calls]
    assert got == [[1, 2], [256 << 20] * 2, [64 << 10] * 2, [8, 8], [16, 16], [0, 0]]


def test_cpu_limit_kills(limits):
    result = run("def f():\n    while True:\n        pass\n", limits.model_copy(update={"timeout_s": 20.0}))
    assert result.status == "limit" and result.signal in (signal.SIGXCPU, signal.SIGKILL)
    assert result.calls[0] == CallOutcome("error", "killed")


def test_memory_limit(limits):
    result = run("def f():\n    return len(bytearray(1 << 30))\n", limits)
    assert result.calls[0] == CallOutcome("error", "MemoryError")


def test_file_size_limit(limits):
    source = ("def f():\n"
              "    with open('big', 'wb') as fh:\n"
              "        try:\n"
              "            fh.write(b'x' * (1 << 20))\n"
              "            fh.flush()\n"
              "        except OSError as err:\n"
              "            return ['refused', err.errno]\n"
              "    return 'written'\n")
    assert json.loads(run(source, limits).calls[0].text) == ["refused", 27]  # EFBIG


def test_process_and_thread_limit(limits):
    source = ("import threading, time\n"
              "def f():\n"
              "    started = 0\n"
              "    try:\n"
              "        for _ in range(100):\n"
              "            threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
              "            started += 1\n"
              "    except RuntimeError:\n"
              "        pass\n"
              "    return started\n")
    started = json.loads(run(source, limits).calls[0].text)
    if os.geteuid() == 0:  # RLIMIT_NPROC binds the sandbox uid, which only this program uses
        assert 0 <= started < 8
    else:  # the invoking user's processes count too
        assert started < 100


def test_open_files_limit(limits):
    source = ("def f():\n"
              "    handles = []\n"
              "    try:\n"
              "        for i in range(100):\n"
              "            handles.append(open(f'f{i}', 'w'))\n"
              "    except OSError as err:\n"
              "        return [len(handles), err.errno]\n")
    opened, errno = json.loads(run(source, limits).calls[0].text)
    assert opened < 16 and errno == 24  # EMFILE


def test_wall_clock_timeout_kills_and_marks_calls(limits):
    source = "import time\ndef f(x):\n    if x == 1:\n        time.sleep(60)\n    return x\n"
    result = run(source, limits.model_copy(update={"timeout_s": 1.0}), [(0,), (1,), (2,)])
    assert result.status == "timeout"
    assert result.calls == [CallOutcome("value", "0"), CallOutcome("timeout"), CallOutcome("not run")]


def test_output_tails_are_capped(limits):
    source = "import sys\ndef f():\n    print('a' * 100000 + 'END')\n    sys.stderr.write('e' * 5000 + 'ERR')\n"
    result = run(source, limits)
    assert result.stdout.endswith("END\n") and len(result.stdout) == 256
    assert result.stderr.endswith("ERR") and len(result.stderr) == 256


def test_no_network(limits):
    source = ("import socket\n"
              "def f():\n"
              "    s = socket.socket()\n"
              "    s.settimeout(1)\n"
              "    s.connect(('127.0.0.1', 9))\n"
              "    return 'connected'\n")
    assert run(source, limits).calls[0].kind == "error"


def frame(*items, raw=None):
    body = raw if raw is not None else json.dumps(items).encode()
    return struct.pack(">I", len(body)) + body


def test_parse_frames_validates_the_stream():
    good = frame("start", 0) + frame("value", 0, "5") + frame("start", 1) + frame("error", 1, "ValueError")
    calls, problem = parse_frames(good, 3, 100, "ok")
    assert problem == "" and calls == [CallOutcome("value", "5"), CallOutcome("error", "ValueError"),
                                      CallOutcome("not run")]
    # a call reported twice is rejected, a started call without a result is marked by the run's status
    calls, _ = parse_frames(frame("value", 0, "5") + frame("value", 0, "6") + frame("start", 1), 2, 100, "timeout")
    assert calls == [CallOutcome("error", "conflicting results"), CallOutcome("timeout")]
    for bad in [frame(raw=b"{not json"), frame("value", 5, "1"), frame("value", True, "1"), frame("value", -1, "1"),
                frame("value", 0, "not json"), frame("value", 0, 5), frame("start"), frame(raw=b'{"a": 1}'),
                frame("pass", 0, "1"), b"\x00\x00\x10\x00short", b"\x7f\xff\xff\xff", b"\x00\x00"]:
        calls, problem = parse_frames(bad + frame("value", 1, "7"), 2, 100, "ok")
        assert problem and calls == [CallOutcome("not run")] * 2, bad  # nothing after garbage is trusted
    calls, problem = parse_frames(frame("value", 0, json.dumps("x" * 500)), 1, 100, "ok")
    assert problem and calls == [CallOutcome("not run")]  # a frame longer than a value may be


def test_garbage_on_the_result_fd_fails_tests_without_crashing(limits):
    source = ("import os\n"
              "def f(x):\n"
              "    for fd in range(3, 64):\n"
              "        try:\n"
              "            os.write(fd, b'\\x00\\x00\\x00\\x05PASS!PASS' * 10)\n"
              "        except OSError:\n"
              "            pass\n"
              "    return x\n")
    result = run(source, limits, [(1,), (2,)])
    assert result.passed([1, 2]) == [False, False] and "malformed" in result.detail


def test_batch_runs_concurrently_in_order(limits):
    programs = [sandbox.Program(f"def f(x):\n    return x + {i}\n", ((1,), (2,))) for i in range(5)]
    results = run_batch(programs, limits, concurrency=2)
    assert [[json.loads(c.text) for c in r.calls] for r in results] == [[1 + i, 2 + i] for i in range(5)]


def test_check_programs_runs_each_distinct_program_once(monkeypatch):
    calls = []
    real = sandbox.run_program

    def counting(source, calls_, limits=None, function="f"):
        calls.append(source)
        return real(source, calls_, limits, function)

    monkeypatch.setattr(sandbox, "run_program", counting)
    cache = ResultCache(maxsize=8)
    good, bad = ProgramTests("def f(x): return x * 2", (((1,), 2), ((3,), 6))), \
        ProgramTests("def f(x): return x + 1", (((1,), 2), ((3,), 6)))
    limits = SandboxLimits(**SMALL)
    assert check_programs([good, bad, good, good], limits, cache=cache) == [[True, True], [True, False]] + \
        [[True, True]] * 2
    assert len(calls) == 2
    assert check_programs([bad, good], limits, cache=cache) == [[True, False], [True, True]] and len(calls) == 2
    other = limits.model_copy(update={"timeout_s": 2.5})  # other limits: another key
    check_programs([good], other, cache=cache)
    assert len(calls) == 3


def test_result_cache_is_bounded():
    cache = ResultCache(maxsize=2)
    for i in range(3):
        cache.put((i,), [True])
    assert cache.get((0,)) is None and cache.get((1,)) == [True] and len(cache.entries) == 2


def test_auto_mode_is_probed_once_and_cached():
    mode = isolation_mode("auto")
    assert mode in MODES and isolation_mode("auto") == mode and isolation_mode("subreaper") == "subreaper"


def test_auto_falls_back_to_subreaper_with_a_warning(monkeypatch):
    failed = sandbox.SandboxResult("crashed", [CallOutcome("not run")], stderr="unshare: Operation not permitted")
    monkeypatch.setattr(sandbox, "_probed", None)
    monkeypatch.setattr(sandbox, "run_program", lambda *a, **k: failed)
    with pytest.warns(RuntimeWarning, match="namespace isolation is unavailable.*Operation not permitted"):
        assert isolation_mode("auto") == "subreaper"
    assert isolation_mode("auto") == "subreaper"  # probed once


def test_subreaper_mode_reports_the_kernel_guard_it_ran_under(limits):
    result = run("def f():\n    return 1\n", limits)
    assert result.calls[0].matches(1)
    assert result.guard == (kernel_guard.available_layers() if limits.mode == "subreaper" else ())
    assert limits.mode == "namespace" or result.guard  # subreaper mode runs only with a layer (or the opt-in)


def test_subreaper_without_a_kernel_guard_refuses_unless_opted_in(monkeypatch):
    monkeypatch.setattr(kernel_guard, "available_layers", lambda: ())
    weak = SandboxLimits(mode="subreaper", **SMALL)
    for attempt in (lambda: run_program("def f():\n    return 1\n", [()], weak),
                    lambda: run_batch([sandbox.Program("def f():\n    return 1\n", ((),))], weak)):
        with pytest.raises(ConfigError, match=r"refuses to run untrusted code.*sandbox\.allow_weak_isolation: true"):
            attempt()
    monkeypatch.setattr(sandbox, "_probed", "subreaper")  # auto, where namespaces do not work
    with pytest.raises(ConfigError, match="namespaces are unavailable and subreaper mode has no kernel boundary"):
        run_program("def f():\n    return 1\n", [()], SandboxLimits(**SMALL))
    assert unavailable("subreaper").startswith("subreaper mode refuses here")
    opted_in = run_program("def f():\n    return 1\n", [()], weak.model_copy(update={"allow_weak_isolation": True}))
    assert opted_in.calls[0].matches(1) and opted_in.guard == () and opted_in.mode == "subreaper"


def test_limits_validate():
    with pytest.raises(ValueError):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError):
        SandboxLimits(mode="docker")
    assert SandboxLimits().job_limits()["memory_bytes"] == 256 << 20
