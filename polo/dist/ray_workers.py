"""Rollout workers on Ray (``dist.backend: ray``, the optional extra ``polo[ray]``).

Each worker is a Ray actor holding its own copy of the policy and its own engine (the recipe's: polo's sampler,
vLLM, the multi-turn driver). Every step the learner splits the step's prompts into one contiguous share per
worker (whole prompts, so groups stay whole), draws one seed per share from its sampling generator, gathers the
scored shares in order, and after each update puts the new weights in Ray's object store once for all workers.

A worker that dies (its process killed, its node lost) is restarted from the model folder with the latest
weights and its share is re-issued with the same seed: the step gets exactly the rows it asked for, none lost
or duplicated, and the same rows it would have got without the failure.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from polo.dist.ray_pool import Restarts, prepare_worker, ray_module, shares
from polo.dist.reward_workers import RewardWorkers, RewardWorkerSpec
from polo.policy.policy import Policy
from polo.engines.base import ENGINES, EngineSetup, Rollouts
from polo.tasks import build_task
from polo.tasks.reward_calls import RewardContext, TrainerState
from polo.tasks.rewards import RewardSpec


@dataclass
class WorkerSpec:
    """What a worker rebuilds its engine from: plain settings (the learner's objects stay in the learner)."""

    engine: dict[str, Any]
    task: dict[str, Any]
    rewards: list[Any]
    """The run's ``RewardSpec``s."""
    setup: dict[str, Any]
    """``EngineSetup``'s sampling settings: samples_per_prompt, max_new_tokens, temperature, top_p, top_k."""
    reward_functions: dict[str, Any] = field(default_factory=dict)
    """Each reward's function by name, registered in a worker that lacks it (functions passed in Python)."""
    chat_template: bool = False
    plugins: list[str] = field(default_factory=list)
    threads: int = 1
    scorer: Any = None
    """``EngineSetup.scorer`` of the workers' engines (``RewardWorkers`` when rewards run on their own actors)."""


class RolloutWorker:
    """The body of one Ray actor: a policy loaded from the learner's model folder and the recipe's engine."""

    def __init__(self, spec: WorkerSpec, model_dir: str):
        prepare_worker(spec.threads, spec.plugins, spec.reward_functions)
        self.policy = Policy.load(model_dir, chat_template=spec.chat_template)
        self.policy.eval()
        task = build_task(spec.task)
        self.context = RewardContext(TrainerState())
        self.engine = ENGINES.build(spec.engine, "engine")
        self.engine.setup(EngineSetup(task, [RewardSpec.of(r) for r in spec.rewards], **spec.setup,
                                      reward_context=self.context, scorer=spec.scorer))

    def pid(self) -> int:
        return os.getpid()

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.policy.load_state_dict(weights)
        self.engine.sync(self.policy, version)

    def rollout(self, examples, prompt_index: list[int], seed: int, samples_per_prompt: int | None,
                greedy: bool, step: int) -> tuple[Rollouts, dict[str, list[float]]]:
        """This worker's share of a step, and the values its reward functions logged (``log_metric``)."""
        self.context.state.global_step = step
        got = self.engine.rollout(self.policy, examples, prompt_index, torch.Generator().manual_seed(seed),
                                  samples_per_prompt=samples_per_prompt, greedy=greedy)
        logged = dict(self.context.logged)
        self.context.logged.clear()
        return got, logged


class RolloutWorkers:
    """``n`` rollout workers on a Ray cluster (a local one started here unless ``address`` names one), and
    ``reward_workers`` reward actors that score for them (``scorer``; none: the rollout workers score)."""

    def __init__(self, spec: WorkerSpec, policy, n: int, *, address: str | None = None, max_restarts: int = 3,
                 rewards: RewardWorkerSpec | None = None, reward_workers: int = 0):
        ray = ray_module()
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            local = {"num_cpus": max(os.cpu_count() or 1, (n + reward_workers) * spec.threads)} if address is None else {}
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)
        self.scorer = RewardWorkers(rewards, reward_workers, max_restarts) if reward_workers else None
        spec = replace(spec, scorer=self.scorer)
        self.spec, self.restarts = spec, Restarts(max_restarts, "rollout worker")
        self.folder = Path(tempfile.mkdtemp(prefix="polo_ray_"))
        policy.save(self.folder / "model")  # what a (re)started worker loads before the latest weights
        self.actor_class = ray.remote(num_cpus=spec.threads)(RolloutWorker)
        self.weights, self.version = None, 0
        self.workers = [self._start() for _ in range(n)]

    def _start(self):
        worker = self.actor_class.remote(self.spec, str(self.folder / "model"))
        if self.weights is not None:
            worker.load_weights.remote(self.weights, self.version)
        return worker

    def _restart(self, i: int) -> None:
        self.workers[i] = self._start()

    def pids(self) -> list[int]:
        return ray_module().get([w.pid.remote() for w in self.workers])

    def sync(self, policy, version: int) -> None:
        """Broadcast the policy's weights (one object-store copy shared by all workers)."""
        ray = ray_module()
        self.weights = ray.put({k: v.detach().cpu() for k, v in policy.state_dict().items()})
        self.version = version
        for worker in self.workers:
            worker.load_weights.remote(self.weights, version)

    def rollout(self, examples: list, prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False, step: int = 0
                ) -> tuple[Rollouts, dict[str, list[float]]]:
        """The scored rollouts of ``examples`` (rows in the order a single engine would give them) and the
        values the reward functions logged on all workers, by name."""
        parts = shares(len(examples), len(self.workers))
        seeds = torch.randint(0, 2**62, (len(parts),), generator=generator).tolist()

        def submit(i: int):
            share = parts[i]
            return self.workers[i].rollout.remote([examples[j] for j in share], [prompt_index[j] for j in share],
                                                  seeds[i], samples_per_prompt, greedy, step)

        ordered = self.restarts.gather(submit, len(parts), self._restart)
        logged: dict[str, list[float]] = {}
        for _, values in ordered:
            for key, value in values.items():
                logged.setdefault(key, []).extend(value)
        return Rollouts.concat([got for got, _ in ordered]), logged

    def close(self) -> None:
        ray = ray_module()
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []
        if self.scorer is not None:
            self.scorer.close()
        if self.started_ray:
            ray.shutdown()
        shutil.rmtree(self.folder, ignore_errors=True)
