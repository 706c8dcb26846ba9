"""The ``test_results`` input: which hidden unit tests each completion's program passed.

``test_results`` ``[B, U]`` float32: 1.0 where row b's program passed test u, 0.0 where it failed, NaN past the
last test of a problem with fewer than U tests (U: the most tests of any row). It is read from the task's
``test_results(completions, examples)`` (e.g. task ``code``), which serves it from the sandbox's result cache
that scoring the rewards filled: a program runs once per step, and again only when the rewards were scored
elsewhere (Ray reward workers) or the cache evicted it.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from polo.core.registry import ConfigError
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider


@register_provider("test_results")
def hidden_test_results(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``test_results`` ``[B, U]``: 1.0 pass, 0.0 fail, NaN where a problem has fewer than U tests."""
    task = ctx.task
    if not callable(getattr(task, "test_results", None)):
        raise ConfigError(f"input 'test_results' needs a task with hidden unit tests (a test_results(completions, "
                          f"examples) method, as task 'code' has); task {task.name!r} has none")
    rows = task.test_results(rollouts.completions, rollouts.examples)
    width = max((len(r) for r in rows), default=0)
    padded = [[float(v) for v in r] + [math.nan] * (width - len(r)) for r in rows]
    table = torch.tensor(padded, dtype=torch.float32).reshape(len(rows), width)
    return {"test_results": table.to(rollouts.batch.rewards.device)}
