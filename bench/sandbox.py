"""Sandbox throughput: candidates per second through ``polo.tasks.sandbox.run_batch``, per isolation mode and
concurrency; the kernel guard's cost per program; escapes of the hostile corpus per mode.

Each repetition runs N distinct small programs (``def f(x): return x*i+1``, 5 calls each: the ``code`` task's
shape) through ``run_batch`` and times the batch; configurations are interleaved across repetitions and the
table reports the median candidates/s and the median wall time per candidate. The load average is printed
beside it: on a shared machine the absolute numbers move with it.

``--guard`` times subreaper mode with the kernel guard (Landlock and seccomp, as it runs) against the same mode
without it (as before the guard: ``allow_weak_isolation`` with the layers hidden), one program at a time,
interleaved, and prints the medians and their ratio. ``--hostile`` runs the hostile corpus of
tests/tasks/test_sandbox_hostile.py once in each mode and prints ``mode: N programs, E escapes`` (a program
escapes when any of its conditions fails; ``world`` is the check after the whole run: processes left, the
canary folder, the host's sockets).

    python bench/sandbox.py [--quick] [--guard] [--hostile]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from polo.tasks import kernel_guard
from polo.tasks.sandbox import (DEVICES, SYSTEM_DIRS, Program, SandboxLimits, isolation_mode, python_dirs, run_batch,
                                unavailable)


def programs(n: int, offset: int) -> list[Program]:
    return [Program(f"def f(x):\n    return x * {offset + i} + 1\n", tuple((x,) for x in range(5))) for i in range(n)]


def apply_ms(layers: tuple[str, ...], runs: int = 31) -> float:
    """Median ms that ``kernel_guard.apply(layers)`` takes in a freshly forked child (the sandbox's rules)."""
    work = tempfile.mkdtemp(prefix="polo-guard-")
    times = []
    try:
        for _ in range(runs):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                start = time.perf_counter()
                kernel_guard.apply(layers, [*python_dirs(), *SYSTEM_DIRS, *DEVICES], [work, *DEVICES])
                os.write(write, repr(time.perf_counter() - start).encode())
                os._exit(0)
            os.close(write)
            times.append(1000 * float(os.read(read, 64)))
            os.close(read)
            os.waitpid(pid, 0)
    finally:
        shutil.rmtree(work)
    return statistics.median(times)


def guard_cost(n: int, reps: int) -> None:
    """Median ms per program in subreaper mode with and without the kernel guard, interleaved."""
    if unavailable("subreaper"):
        print(f"guard: skipped ({unavailable('subreaper')})")
        return
    offered = kernel_guard.available_layers
    weak = SandboxLimits(mode="subreaper", allow_weak_isolation=True)
    ms: dict[str, list[float]] = {"with the guard": [], "without": []}
    run_batch(programs(4, 0), weak)  # start the fork server
    for rep in range(reps):
        for name in ms:
            kernel_guard.available_layers = offered if name == "with the guard" else lambda: ()
            try:
                start = time.perf_counter()
                results = run_batch(programs(n, 1000 * rep), weak, concurrency=1)
                ms[name].append(1000 * (time.perf_counter() - start) / n)
            finally:
                kernel_guard.available_layers = offered
            assert all(r.status == "ok" for r in results) and {r.guard for r in results} == {
                offered() if name == "with the guard" else ()}
    medians = {name: statistics.median(values) for name, values in ms.items()}
    print(f"subreaper mode, {n} programs × {reps} repetitions, concurrency 1, layers {'+'.join(offered())}: "
          + ", ".join(f"{name} {value:.1f} ms/program" for name, value in medians.items())
          + f"; ratio {medians['with the guard'] / medians['without']:.3f}")
    kernel_guard.seccomp_program(0)  # built once, as the fork server does
    print("applying the guard in a forked child, median of 31: "
          + ", ".join(f"{'+'.join(layers)} {apply_ms(layers):.2f} ms" for layers in
                      [(layer,) for layer in offered()] + ([offered()] if len(offered()) > 1 else [])))


def hostile() -> None:
    """``mode: N programs, E escapes`` for each mode, over the tests' hostile corpus."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tasks"))
    import test_sandbox_hostile as corpus

    for mode in ("namespace", "subreaper"):
        if unavailable(mode):
            print(f"{mode}: skipped ({unavailable(mode)})")
            continue
        folder = Path(tempfile.mkdtemp(prefix=f"polo-hostile-{mode}-"))
        try:
            escaped = corpus.escapes(mode, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{mode}: {len(corpus.CORPUS)} programs, {len(escaped)} escapes" + (f" ({', '.join(escaped)})"
                                                                                  if escaped else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 programs, 3 repetitions")
    parser.add_argument("--guard", action="store_true", help="only the kernel guard's cost per program")
    parser.add_argument("--hostile", action="store_true", help="only the hostile corpus's escapes per mode")
    args = parser.parse_args()
    n, reps = (16, 3) if args.quick else (48, 7)
    if args.guard or args.hostile:
        if args.hostile:
            hostile()
        if args.guard:
            guard_cost(n, reps)
        return
    modes = ["namespace", "subreaper"] if isolation_mode("auto") == "namespace" else ["subreaper"]
    configs = [(mode, concurrency) for mode in modes for concurrency in (1, 2)]
    rates: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    run_batch(programs(4, 0), SandboxLimits(mode=modes[-1]))  # start the fork server
    print(f"{n} programs × {reps} repetitions; load average {os.getloadavg()[0]:.1f} on "
          f"{len(os.sched_getaffinity(0))} CPUs; uid {os.geteuid()}")
    for rep in range(reps):
        for mode, concurrency in configs:
            batch = programs(n, 1000 * rep)
            start = time.perf_counter()
            results = run_batch(batch, SandboxLimits(mode=mode), concurrency=concurrency)
            rates[(mode, concurrency)].append(n / (time.perf_counter() - start))
            assert all(r.status == "ok" for r in results), [r for r in results if r.status != "ok"][:1]
    print(f"{'mode':<10} {'concurrency':>11} {'candidates/s':>13} {'ms/candidate':>13}")
    for (mode, concurrency), values in rates.items():
        rate = statistics.median(values)
        print(f"{mode:<10} {concurrency:>11} {rate:>13.1f} {1000 / rate:>13.1f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
