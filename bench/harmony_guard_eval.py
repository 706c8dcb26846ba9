"""HarmonyGuard's side-by-side measurement: one policy's task success and compliance on held-out GuardedKB-v0
seeds, played without the checker and with it (one regeneration), at temperature 1.

Each of ``--seeds`` test seeds is played ``--episodes`` times per mode from one generator seed (the same for
both modes). Success is per episode; compliance is the fraction of episodes with no risky played step.

    python bench/harmony_guard_eval.py POLICY_FOLDER [--seeds 200] [--episodes 4]

POLICY_FOLDER is a saved policy (a run's ``final/`` or a warm start under ``$POLO_CACHE/warm_start``).
"""
from __future__ import annotations

import argparse
import json

import torch

from polo.policy.policy import Policy
from polo.engines.base import EngineSetup
from polo.methods.harmony_guard.engine import HarmonyGuard, guard_metrics
from polo.tasks import build_task


def play_mode(policy, task, examples, episodes: int, regenerations: int, seed: int) -> dict[str, float]:
    engine = HarmonyGuard(regenerations=regenerations)
    engine.setup(EngineSetup(task, [], episodes, task.max_completion_chars + 1))
    with torch.no_grad():
        got = engine.rollout(policy, examples, list(range(len(examples))), torch.Generator().manual_seed(seed))
    x = got.batch.extras
    _, episode = torch.unique(x["traj"], return_inverse=True)
    success = torch.zeros(int(episode.max()) + 1).scatter_reduce(0, episode, x["correct"], "amax").mean()
    return {"success": float(success), **guard_metrics(x["traj"], x["risky"], x["aligned"], x["regenerated"]),
            "proposed_risky_rate": float(x["proposed_risky"].float().mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policy")
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--generator-seed", type=int, default=123)
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = Policy.load(args.policy)
    policy.eval()
    task = build_task({"name": "environment", "env": {"name": "GuardedKB-v0"}})
    examples = task.examples("test", args.seeds, seed=0)
    row = {mode: play_mode(policy, task, examples, args.episodes, regen, args.generator_seed)
           for mode, regen in (("unguarded", 0), ("guarded", 1))}
    print(json.dumps({"policy": args.policy, "seeds": args.seeds, "episodes_per_seed": args.episodes, **row}))


if __name__ == "__main__":
    main()
