"""The learner's side of scale-out: Ray rollout workers built from the recipe (polo.dist.ray_workers)."""
from __future__ import annotations

from polo.dist.ray_workers import RolloutWorkers, WorkerSpec
from polo.dist.reward_workers import RewardWorkerSpec
from polo.tasks.rewards import REWARDS


def start_rollout_workers(recipe, policy, reward_specs, max_new_tokens: int) -> RolloutWorkers:
    """``dist.rollout_workers`` Ray actors, each with the recipe's engine, task and rewards and a copy of
    ``policy``, and ``dist.reward_workers`` reward actors (a local Ray cluster unless ``dist.address`` names
    one)."""
    r, d = recipe.rollout, recipe.dist
    functions = {s.name: REWARDS.get(s.name) for s in reward_specs if s.name in REWARDS}
    rewards = RewardWorkerSpec(task=dict(recipe.task), reward_functions=functions, plugins=list(recipe.plugins),
                               threads=d.worker_threads)
    spec = WorkerSpec(engine=recipe.engine if isinstance(recipe.engine, dict) else {"name": recipe.engine},
                      task=dict(recipe.task), rewards=list(reward_specs), reward_functions=functions,
                      setup={"samples_per_prompt": r.samples_per_prompt, "max_new_tokens": max_new_tokens,
                             "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k},
                      chat_template=recipe.model.chat_template, plugins=list(recipe.plugins), threads=d.worker_threads)
    return RolloutWorkers(spec, policy, d.rollout_workers, address=d.address, max_restarts=d.max_restarts,
                          rewards=rewards, reward_workers=d.reward_workers)
