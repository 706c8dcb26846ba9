"""Retroformer's acceptance measurement: the frozen actor's second-trial success on held-out TextGrid seeds with
reflections from the trained retrospective model, from the untrained one (the warm start) and with none.

The actor (the ``frozen_actor`` role: the warm start, frozen) plays trial 1 of each held-out seed; every failed trial is
reflected on once and the actor plays trial 2 with that reflection in its memory. Second-trial success is the
fraction of seeds solved within the two trials. ``--samples R`` repeats the sampled measurement R times
(actor and reflections at the rollout temperature, a fixed generator seed per repeat, the same for every
variant); the greedy measurement is one deterministic pass. A sanity block plays trial 1 with a memory holding
the expert's first moves, a random plan, or nothing, to show whether the actor reads plans at all.

    python bench/retroformer_reflections.py RUN_DIR [--samples 5] [--seeds 200]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
from pathlib import Path

import torch

from polo.envs import expert_policy, play
from polo.methods.retroformer.task import reflection_text
from polo.train.checkpoint import latest_checkpoint, load_checkpoint
from polo.train.config import load_recipe
from polo.train.trainer import Trainer


def second_trial(engine, actor, retro, seeds, samples: int, reflect: bool = True) -> dict[str, float]:
    """First-trial and within-two-trials success, greedy and averaged over ``samples`` sampled repeats."""
    greedy = engine.trials_of(retro, actor, seeds, 1, None, greedy=True, reflect=reflect)
    row = {"greedy_first": sum(greedy.first_success) / len(seeds), "greedy_second": sum(greedy.solved) / len(seeds),
           "greedy_reflections": greedy.calls[0]["texts"][:4] if greedy.calls else []}
    first, second = [], []
    for r in range(samples):
        got = engine.trials_of(retro, actor, seeds, 1, torch.Generator().manual_seed(1000 + r), greedy=False,
                               reflect=reflect)
        first.append(sum(got.first_success) / len(seeds))
        second.append(sum(got.solved) / len(seeds))
    if samples:
        row.update(sampled_first=sum(first) / samples, sampled_second=sum(second) / samples)
    return row


def plan_sanity(engine, actor, seeds, samples: int) -> dict[str, float]:
    """Trial-1 success (sampled, mean over repeats) with an expert-plan memory, a random-plan memory, none."""
    task = engine.settings.task
    env, rng = task.make_env(), random.Random(0)
    expert = ["".join(a for _, a, _ in play(env, s, expert_policy, 0).steps[: task.plan_len]) for s in seeds]
    rand = ["".join(rng.choice("nsew") for _ in range(task.plan_len)) for _ in seeds]
    out = {}
    for name, memories in (("expert_plan", [[reflection_text("bump", p)] for p in expert]),
                           ("random_plan", [[reflection_text("bump", p)] for p in rand]),
                           ("no_memory", [[] for _ in seeds])):
        wins = 0
        for r in range(samples):
            episodes = engine._episodes(seeds, memories)
            engine.play(actor, episodes, torch.Generator().manual_seed(2000 + r), False)
            wins += sum(ep.success for ep in episodes)
            engine._memory.clear()
        out[name] = wins / (samples * len(seeds))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=200)
    args = parser.parse_args()
    recipe = load_recipe(str(args.run_dir / "config.yaml"), [f"train.eval_size={args.seeds}"])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(recipe, tmp, log=lambda *_: None)
    engine, untrained = trainer.engine, trainer.policy
    actor = trainer.models["frozen_actor"]
    ckpt = latest_checkpoint(args.run_dir)
    trained = copy.deepcopy(untrained)
    trained.load_state_dict(load_checkpoint(ckpt)[0]["policy"])
    seeds = [e.columns["seed"] for e in trainer.eval_examples]
    report = {"run": str(args.run_dir), "checkpoint": str(ckpt), "held_out_seeds": len(seeds),
              "samples": args.samples,
              "no_reflection": second_trial(engine, actor, untrained, seeds, args.samples, reflect=False),
              "untrained_reflections": second_trial(engine, actor, untrained, seeds, args.samples),
              "trained_reflections": second_trial(engine, actor, trained, seeds, args.samples),
              "plan_sanity_trial1": plan_sanity(engine, actor, seeds, args.samples)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
