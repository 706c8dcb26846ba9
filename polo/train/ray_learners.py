"""Data-parallel learners launched as Ray actors (``dist.learners: N``), the alternative to ``torchrun``.

polo starts N actors on the Ray cluster (a local one unless ``dist.address`` names one; one GPU each when the
model is on cuda), gives each torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, and rank 0's
node address and a free port as ``MASTER_ADDR``/``MASTER_PORT``) and runs the same ``Trainer`` in each: from
there the data-parallel learner of ``polo.dist.data_parallel`` takes over, and rank 0 writes the run folder.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from polo.dist.ray_pool import ray_module


class Learner:
    """The body of one learner actor."""

    def address(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0's: the process group's rendezvous)."""
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray_module().util.get_node_ip_address(), port

    def train(self, rank: int, world: int, master: tuple[str, int], recipe: dict[str, Any] | None, run_dir: str,
              resume_overrides: list[str] | None, plugins: list[str]) -> list[dict]:
        """Rank ``rank`` of ``world``: a new run from ``recipe``, or (``recipe`` None) ``run_dir`` resumed."""
        from polo.tasks.plugins import load_plugin
        from polo.train.config import load_recipe
        from polo.train.trainer import Trainer, resume

        os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
                           "MASTER_ADDR": master[0], "MASTER_PORT": str(master[1])})
        for plugin in plugins:
            load_plugin(plugin)
        log = print if rank == 0 else (lambda message: None)
        if recipe is None:
            trainer = resume(Path(run_dir), log, resume_overrides or [])
        else:
            trainer = Trainer(load_recipe(recipe), Path(run_dir), log)
        return trainer.run()


def train_on_ray(recipe, run_dir: Path, *, resume_overrides: list[str] | None = None) -> list[dict]:
    """Train ``recipe`` in ``run_dir`` with ``dist.learners`` data-parallel ranks on Ray, or, given
    ``resume_overrides`` (``recipe`` then being the run's own, ``load_run_config``), resume ``run_dir``; rank 0's
    metrics rows."""
    ray = ray_module()
    n, device = recipe.dist.learners, recipe.model.device
    started = not ray.is_initialized()
    if started:
        local = {"num_cpus": max(os.cpu_count() or 1, n)} if recipe.dist.address is None else {}
        ray.init(address=recipe.dist.address, include_dashboard=False, **local)
    actor = ray.remote(num_cpus=1, num_gpus=1 if device.startswith("cuda") else 0)(Learner)
    learners = [actor.remote() for _ in range(n)]
    try:
        master = ray.get(learners[0].address.remote())
        tree = None if resume_overrides is not None else recipe.model_dump(mode="json")
        rows = ray.get([learner.train.remote(rank, n, master, tree, str(run_dir), resume_overrides,
                                             list(recipe.plugins)) for rank, learner in enumerate(learners)])
        return rows[0]
    finally:
        for learner in learners:
            ray.kill(learner)
        if started:
            ray.shutdown()
