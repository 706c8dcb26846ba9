"""What Ray rollout and reward workers share: the Ray import, a worker process's set-up, splitting rows into
shares, and gathering the shares' results with dead workers restarted and their shares re-issued."""
from __future__ import annotations

from typing import Any, Callable

import torch

from polo.core.registry import ConfigError
from polo.tasks.plugins import load_plugin
from polo.tasks.rewards import REWARDS


def ray_module():
    try:
        import ray
    except ImportError as err:
        raise ConfigError("dist.backend: ray needs the optional dependency ray: pip install 'polo[ray]'") from err
    return ray


def prepare_worker(threads: int, plugins: list[str], reward_functions: dict[str, Any]) -> None:
    """A fresh worker process as the learner's: its torch threads, the run's plugin files, and the reward
    functions the learner registered from Python (by name)."""
    torch.set_num_threads(threads)
    for plugin in plugins:
        load_plugin(plugin)
    for name, fn in reward_functions.items():
        if name not in REWARDS:
            REWARDS.register(name)(fn)


def shares(n_items: int, n_workers: int) -> list[range]:
    """Contiguous, near-equal, non-empty index ranges covering ``0..n_items−1`` (fewer when items are few)."""
    k = min(n_items, n_workers)
    bounds = [n_items * i // k for i in range(k + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


class Restarts:
    """A budget of worker restarts shared by a pool (``dist.max_restarts``)."""

    def __init__(self, limit: int, what: str):
        self.limit, self.what, self.used = limit, what, 0

    def gather(self, submit: Callable[[int], Any], n: int, restart: Callable[[int], None]) -> list:
        """Results of shares ``0..n−1`` in order: ``submit(i)`` returns share i's Ray object ref; a share whose
        worker died is re-issued after ``restart(i)``, so every share is computed exactly once."""
        ray = ray_module()
        pending = {i: submit(i) for i in range(n)}
        results: dict[int, Any] = {}
        while pending:
            i, ref = next(iter(pending.items()))
            try:
                results[i] = ray.get(ref)
                del pending[i]
            except ray.exceptions.RayActorError as err:
                self.used += 1
                if self.used > self.limit:
                    raise RuntimeError(f"Ray {self.what} {i} died and the {self.what}s were already restarted "
                                       f"{self.limit} times (dist.max_restarts): {err}") from err
                restart(i)
                pending[i] = submit(i)
        return [results[i] for i in range(n)]
