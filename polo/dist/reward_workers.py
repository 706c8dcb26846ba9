"""Reward workers on Ray (``dist.reward_workers: N``): slow reward functions (sandboxes, judges) score on their
own actors instead of inside the engine.

``RewardWorkers`` is the engine's scorer (``EngineSetup.scorer``, the signature of ``score_batch``): it splits
the rows into one contiguous share per actor, scores the shares in parallel and concatenates them in order.
The actors are *named*, so the object can travel (to every rollout worker): each holder looks the actors up
by name, and whichever holder finds one dead creates it again under the same name and re-issues its share.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

from polo.dist.ray_pool import Restarts, prepare_worker, ray_module, shares
from polo.tasks import build_task
from polo.tasks.reward_calls import RewardContext, TrainerState
from polo.tasks.rewards import Scores, score_batch


@dataclass
class RewardWorkerSpec:
    """What a reward actor rebuilds: the task, reward functions passed in Python (by name), plugin files."""

    task: dict[str, Any]
    reward_functions: dict[str, Any] = field(default_factory=dict)
    plugins: list[str] = field(default_factory=list)
    threads: int = 1


class RewardWorker:
    """The body of one reward actor."""

    def __init__(self, spec: RewardWorkerSpec):
        prepare_worker(spec.threads, spec.plugins, spec.reward_functions)
        self.task = build_task(spec.task)

    def pid(self) -> int:
        return os.getpid()

    def score(self, specs, examples, completions, completion_ids, step: int) -> tuple[Scores, dict]:
        context = RewardContext(TrainerState(global_step=step))
        return score_batch(self.task, specs, examples, completions, completion_ids, context), context.logged


_ACTOR_CLASSES: dict[int, Any] = {}
"""The Ray actor class of ``RewardWorker`` per thread count, made once per process."""


class RewardWorkers:
    """``n`` named reward actors on the running Ray cluster, used as a ``score_batch`` replacement."""

    def __init__(self, spec: RewardWorkerSpec, n: int, max_restarts: int = 3):
        self.spec, self.n = spec, n
        self.prefix = f"polo_reward_{uuid.uuid4().hex[:12]}"
        self.restarts = Restarts(max_restarts, "reward worker")
        self.handles: dict[int, Any] = {}
        for i in range(n):
            self._actor(i)

    def __getstate__(self) -> dict:
        """What travels to a rollout worker: no actor handles (it looks the actors up by name) and a fresh
        restart budget."""
        return {**self.__dict__, "handles": {}, "restarts": Restarts(self.restarts.limit, self.restarts.what)}

    def _actor(self, i: int):
        """Actor i: its cached handle, else the running actor of that name or a new one under it."""
        if i not in self.handles:
            if self.spec.threads not in _ACTOR_CLASSES:
                _ACTOR_CLASSES[self.spec.threads] = ray_module().remote(num_cpus=self.spec.threads)(RewardWorker)
            self.handles[i] = _ACTOR_CLASSES[self.spec.threads].options(
                name=f"{self.prefix}_{i}", get_if_exists=True).remote(self.spec)
        return self.handles[i]

    def _forget(self, i: int) -> None:
        """Drop actor i's dead handle; killing it releases its name at once, so the next ``_actor(i)`` creates a
        new one instead of finding the dead one (Ray keeps a dead actor's name until told or until later)."""
        ray_module().kill(self.handles.pop(i))

    def __call__(self, task, specs, examples, completions, completion_ids=None, context=None) -> Scores:
        parts = shares(len(examples), self.n)
        step = context.state.global_step if context is not None else 0

        def submit(i: int):
            rows = parts[i]
            ids = None if completion_ids is None else [completion_ids[j] for j in rows]
            return self._actor(i).score.remote(specs, [examples[j] for j in rows], [completions[j] for j in rows],
                                               ids, step)

        scored = self.restarts.gather(submit, len(parts), self._forget)
        if context is not None:
            for _, logged in scored:
                context.log_all(logged)
        first = scored[0][0]
        return Scores(torch.cat([s.values for s, _ in scored]), torch.cat([s.present for s, _ in scored]),
                      first.names, first.weights)

    def pids(self) -> list[int]:
        return ray_module().get([self._actor(i).pid.remote() for i in range(self.n)])

    def close(self) -> None:
        ray = ray_module()
        for i in range(self.n):
            try:
                ray.kill(ray.get_actor(f"{self.prefix}_{i}"))
            except ValueError:  # already gone
                pass
