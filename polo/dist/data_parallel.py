"""Data-parallel learners on torch.distributed: N processes (``torchrun --nproc_per_node N -m polo.cli train``)
train one policy, each on its share of every batch.

What each rank does (docs/scaling.md):

- rollouts: the step's prompts are cut into N contiguous shards; rank r generates shard r with its own
  sampling generator (seeded from N seeds drawn from the shared ``sample_generator``, so the shared generator
  advances alike everywhere) and the shards are gathered in order, so every rank holds the same full batch
  (advantages need whole groups; rewards, advantages and hooks then run identically on every rank);
- update: each minibatch's rows are cut into N contiguous shards (on group boundaries when a component needs
  whole groups); rank r runs the forward/backward of its shard with the loss normalised by the *whole*
  minibatch's counts, so ``∇L = Σ_r ∇L_r``: one all-reduce (SUM) of the gradients before clipping gives every
  rank the single-process gradient, and the same optimizer step;
- metrics: the token-weighted sums of the update's diagnostics are gathered, so rank 0 logs the global ones;
- held-out evaluation: the eval examples are sharded and the solved counts summed (N× less work each);
- files: only rank 0 writes the run folder and logs; the others hold no lock.

World size 1 (no launcher) is a ``DataParallel`` whose operations pass straight through, so a
single-process run is unchanged bit for bit.
"""
from __future__ import annotations

import atexit
import os
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist

from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.core.segment import run_start_rows
from polo.engines.base import Rollouts

LAUNCH_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
"""What torchrun sets in every process it starts (with MASTER_ADDR and MASTER_PORT)."""


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ConfigError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {name} is not set: launch the data-parallel "
                              f"learner with `torchrun --nproc_per_node N -m polo.cli train RECIPE`")
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer (torchrun sets it)") from None


def process_group_backend(setting: str) -> str:
    """``dist.learner_backend`` → torch.distributed's backend string. ``nccl`` (and ``auto`` where CUDA exists)
    pairs NCCL for CUDA tensors (the gradients of a policy on the GPU) with gloo for host-side objects (rollouts,
    metrics); ``gloo`` (and ``auto`` without CUDA) is gloo for everything."""
    if setting == "nccl" and not torch.cuda.is_available():
        raise ConfigError("dist.learner_backend=nccl needs CUDA, which this machine lacks: use gloo (or auto)")
    if setting == "nccl" or (setting == "auto" and torch.cuda.is_available()):
        return "cpu:gloo,cuda:nccl"
    if setting in ("auto", "gloo"):
        return "gloo"
    raise ConfigError(f"dist.learner_backend must be auto, gloo or nccl, got {setting!r}")


@dataclass
class DataParallel:
    """This process's place among the learners: ``rank`` of ``world``, ``local_rank`` on its machine; ``owned``:
    this object initialised the process group (and destroys it at exit)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str = "auto"
    owned: bool = False

    @classmethod
    def from_environment(cls, backend: str = "auto") -> "DataParallel":
        """Join the process group the caller initialised, or initialise one from torchrun's environment
        (``WORLD_SIZE`` > 1), or stand alone (world size 1)."""
        if dist.is_available() and dist.is_initialized():
            local = _env_int("LOCAL_RANK", dist.get_rank())
            return cls(dist.get_rank(), dist.get_world_size(), local, backend)
        world = _env_int("WORLD_SIZE", 1)
        if world < 1:
            raise ConfigError(f"WORLD_SIZE must be at least 1, got {world}")
        if world == 1:
            return cls(backend=backend)
        rank = _env_int("RANK")
        local = _env_int("LOCAL_RANK", rank)
        if not 0 <= rank < world:
            raise ConfigError(f"RANK={rank} is outside 0..{world - 1} (WORLD_SIZE={world})")
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
        if missing:
            raise ConfigError(f"WORLD_SIZE={world} but {' and '.join(missing)} not set: launch the data-parallel "
                              f"learner with `torchrun --nproc_per_node N -m polo.cli train RECIPE`")
        name = process_group_backend(backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(local % torch.cuda.device_count())  # "cuda" is this rank's GPU from here on
        dist.init_process_group(name, rank=rank, world_size=world)
        group = cls(rank, world, local, backend, owned=True)
        atexit.register(group.close)
        return group

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes the run folder and logs."""
        return self.rank == 0

    def close(self) -> None:
        """Destroy the process group if this object initialised it (idempotent)."""
        if self.owned and dist.is_initialized():
            dist.destroy_process_group()
        self.owned = False

    # ------------------------------------------------------------------ checks
    def check(self, components: dict, dist_backend: str) -> None:
        """Refuse what a data-parallel learner cannot do (with world size 1 everything passes)."""
        if self.world == 1:
            return
        if "optimizer_hook" in components:
            raise ConfigError(f"optimizer_hook {components['optimizer_hook'].registry_name!r} needs K gradient "
                              f"estimates from one process's micro-batches, which a data-parallel learner "
                              f"(WORLD_SIZE={self.world}) splits over ranks: drop optimizer_hook or train on one rank")
        if dist_backend != "local":
            raise ConfigError(f"dist.backend={dist_backend} with a data-parallel learner (WORLD_SIZE={self.world}) "
                              f"would start rollout workers on every rank: use dist.backend=local, or one learner")

    def check_device(self, device: torch.device) -> None:
        """``learner_backend=nccl`` reduces CUDA tensors only: the policy must be on the GPU."""
        if self.world > 1 and self.backend == "nccl" and device.type != "cuda":
            raise ConfigError(f"dist.learner_backend=nccl reduces gradients on the GPU, but the policy is on "
                              f"{device}: put the model on cuda, or use gloo")

    # ------------------------------------------------------------------ collectives
    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def same(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (a picklable object: a time budget's clock, a run folder name)."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list:
        """Every rank's ``value``, in rank order, on every rank."""
        if self.world == 1:
            return [value]
        out: list = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def rank0_first(self, build: Callable[[], Any]) -> Any:
        """``build()`` on rank 0, then on the others: what rank 0 caches (the warm start) is built once."""
        if self.is_main:
            out = build()
            self.barrier()
            return out
        self.barrier()
        return build()

    def sync_random_state(self) -> None:
        """Rank 0's torch and Python random states everywhere (building a warm start reseeds rank 0 only)."""
        if self.world > 1:
            torch_state, python_state = self.same((torch.get_rng_state(), random.getstate()))
            torch.set_rng_state(torch_state)
            random.setstate(python_state)

    @torch.no_grad()
    def broadcast_weights(self, models: Iterable[Any]) -> None:
        """Rank 0's parameters and buffers into every rank's ``models`` (in place); a model that is no
        ``torch.nn.Module`` (an endpoint) has none and is skipped."""
        if self.world == 1:
            return
        for module in models:
            if not isinstance(module, torch.nn.Module):
                continue
            for tensor in module.state_dict().values():
                dist.broadcast(tensor, src=0)

    def all_reduce_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """``p.grad ← Σ_ranks p.grad`` for every parameter some rank has a gradient for (a rank without rows
        contributes zeros); parameters no rank touched keep ``grad = None``, as in one process. One SUM
        all-reduce per (device, dtype) of the flattened gradients with a has-gradient flag per parameter."""
        if self.world == 1:
            return
        buckets: dict[tuple, list[torch.nn.Parameter]] = {}
        for p in params:
            buckets.setdefault((p.device, p.dtype), []).append(p)
        for (device, dtype), group in buckets.items():
            grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel(), device=device, dtype=dtype)
                     for p in group]
            flags = torch.tensor([p.grad is not None for p in group], device=device, dtype=dtype)
            flat = torch.cat([*grads, flags])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            summed, flags = flat[: -len(group)], flat[-len(group):]
            for p, grad, touched in zip(group, summed.split([p.numel() for p in group]), flags.tolist()):
                if touched:
                    p.grad = grad.view_as(p)

    # ------------------------------------------------------------------ sharding
    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's contiguous share ``[lo, hi)`` of ``n`` items (sizes differ by at most one)."""
        return n * self.rank // self.world, n * (self.rank + 1) // self.world

    def shard_rows(self, group: torch.Tensor, whole_groups: bool) -> torch.Tensor:
        """Row indices of this rank's contiguous share of a minibatch. With ``whole_groups`` (a group's rows
        contiguous) each group goes to the rank where its first row falls, so no group is split."""
        n = len(group)
        rows = torch.arange(n)
        key = run_start_rows(group) if whole_groups and n else rows
        return rows[key * self.world // max(n, 1) == self.rank]

    def shard(self, batch: RolloutBatch, whole_groups: bool) -> RolloutBatch:
        """This rank's rows of ``batch`` (all of it with world size 1)."""
        return batch if self.world == 1 else batch.select(self.shard_rows(batch.group, whole_groups))

    def sum_metrics(self, sums: dict[str, float], weight: float) -> tuple[dict[str, float], float]:
        """The update's token-weighted metric sums and total weight over all ranks, added in rank order."""
        if self.world == 1:
            return sums, weight
        total: dict[str, float] = {}
        total_weight = 0.0
        for part, w in self.gather((sums, weight)):
            total_weight += w
            for k, v in part.items():
                total[k] = total.get(k, 0.0) + v
        return total, total_weight

    def rollout(self, generate: Callable[[list, list[int], torch.Generator], Rollouts], examples: list,
                indices: list[int], generator: torch.Generator) -> Rollouts:
        """``generate(examples, indices, generator)`` of this rank's share of the prompts, the shards gathered in
        order (groups renumbered by ``Rollouts.concat``): every rank returns the same full rollouts."""
        if self.world == 1:
            return generate(examples, indices, generator)
        seeds = torch.randint(2**62, (self.world,), generator=generator).tolist()  # the shared generator advances alike
        lo, hi = self.bounds(len(examples))
        local = None
        if hi > lo:
            got = generate(examples[lo:hi], indices[lo:hi], torch.Generator().manual_seed(seeds[self.rank]))
            device = got.batch.response_ids.device
            local = (Rollouts(got.batch.to("cpu"), got.completions, got.examples, got.turns), device)
        parts = [part for part in self.gather(local) if part is not None]
        out = Rollouts.concat([rollouts for rollouts, _ in parts])
        out.batch = out.batch.to(parts[0][1])
        return out

    def evaluate(self, evaluate: Callable[[list], float], examples: list) -> float:
        """``evaluate(examples)`` (a solved fraction) over the ranks' shards: Σ solved / Σ examples."""
        if self.world == 1:
            return evaluate(examples)
        lo, hi = self.bounds(len(examples))
        solved = evaluate(examples[lo:hi]) * (hi - lo) if hi > lo else 0.0
        return sum(self.gather(solved)) / max(len(examples), 1)


class NoMetrics:
    """The metrics log of a rank other than 0: writes nothing, reads no rows."""

    def write(self, row: dict) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def read(self) -> list[dict]:
        return []
