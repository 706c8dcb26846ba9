"""INSPO's acceptance measurement on a finished ``inspo`` run: the mean return of instructions sampled from the
final population against the initial population, both played by the run's final policy.

    python bench/inspo_population.py RUN_DIR [--seeds 100] [--episodes 4]

Each instruction of both populations plays ``--episodes`` sampled episodes on each of the first ``--seeds``
held-out seeds (the same seeds for all); a population's score is its instructions' mean returns weighted by
its sampling probabilities (uniform for the initial population, whose scores are all equal). On the
``instructed_environment`` task it also prints each population's demonstrator ε (the warm start's noise the
instructions stand for). Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from polo.train.trainer import resume


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()
    trainer = resume(args.run, log=lambda *_: None)
    engine, task = trainer.engine, trainer.task
    seeds = [e.columns["seed"] for e in trainer.eval_examples[: args.seeds]]
    trainer.policy.eval()
    out = {"run": str(args.run), "step": trainer.step_count, "seeds": len(seeds), "episodes": args.episodes}
    initial, final = engine.initial_population, engine.population_texts
    populations = {"initial": (initial, torch.full((len(initial),), 1 / len(initial))), "final": (final, engine.probs())}
    with torch.no_grad():
        for name, (texts, probs) in populations.items():
            mean, per = engine.expected_return(trainer.policy, texts, probs, seeds, args.episodes,
                                               torch.Generator().manual_seed(0))
            out[name] = {"mean_return": mean, "instructions": {t: {"return": r, "prob": float(p)}
                                                               for t, r, p in zip(texts, per, probs)}}
            if hasattr(task, "epsilon"):
                out[name]["demo_epsilon"] = sum(float(p) * task.epsilon(t) for t, p in zip(texts, probs))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
