"""Sandbox throughput: candidates per second through ``polo.tasks.sandbox.run_batch``, per isolation mode and
concurrency.

Each repetition runs N distinct small programs (``def f(x): return x*i+1``, 5 calls each: the ``code`` task's
shape) through ``run_batch`` and times the batch; configurations are interleaved across repetitions and the
table reports the median candidates/s and the median wall time per candidate. The load average is printed
beside it: on a shared machine the absolute numbers move with it.

    python bench/sandbox.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from polo.tasks.sandbox import Program, SandboxLimits, isolation_mode, run_batch


def programs(n: int, offset: int) -> list[Program]:
    return [Program(f"def f(x):\n    return x * {offset + i} + 1\n", tuple((x,) for x in range(5))) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 programs, 3 repetitions")
    args = parser.parse_args()
    n, reps = (16, 3) if args.quick else (48, 7)
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
