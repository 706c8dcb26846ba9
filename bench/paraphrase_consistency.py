"""Consistency across paraphrases: a run's policy answers K wordings of each held-out problem (the task's own
and K−1 rewordings from its ``paraphrases``), greedily; prints held-out accuracy and how consistent the answers are.

    python bench/paraphrase_consistency.py RUN [--problems 300] [--k 8] [--seed 0] [--initial]

RUN is a run folder (its last checkpoint is evaluated; ``--initial``: the warm start it began from, taken from
``$POLO_CACHE``). Printed, as one JSON line:

* ``accuracy_original`` / ``accuracy_paraphrased``: greedy accuracy on the task's wordings / on the rewordings;
* ``all_correct``: fraction of problems whose K wordings are all answered correctly;
* ``same_answer``: fraction of problems whose K final answers (the text after the task's answer marker, else
  the whole completion) are identical, right or wrong (a completion without the marker has no answer);
* ``entropy_gap``: mean over problems of the mean over pairs j < l of |H_j − H_l|, H the word entropy of a
  completion (``polo.methods.info_consistency.word_entropy``); ``word_entropy``: the mean H.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from polo.engines.accuracy import completions
from polo.methods.info_consistency.word_entropy import word_entropy
from polo.tasks import build_task
from polo.tasks.traced import final_answer
from polo.train.config import load_recipe
from polo.train.export import checkpoint_policy
from polo.train.trainer import load_policy, max_new_tokens


def run_policy(run: Path, recipe, task, prompts, initial: bool):
    if initial:
        return load_policy(recipe, task, prompts, log=lambda *_: None)
    return checkpoint_policy(run, recipe)[0]


def consistency(task, texts: list[str], asks: list, k: int) -> dict[str, float]:
    """The printed metrics from the completions ``texts`` of ``asks`` (K consecutive wordings per problem)."""
    n = len(asks) // k
    correct = torch.tensor([task.is_correct(t, e) for t, e in zip(texts, asks)]).view(n, k)
    answers = [(final_answer(t) if task.answer_marker else t.strip()) for t in texts]
    same = [None not in answers[i * k:(i + 1) * k] and len(set(answers[i * k:(i + 1) * k])) == 1 for i in range(n)]
    H = torch.tensor([word_entropy(t) for t in texts], dtype=torch.float64).view(n, k)
    pairs = torch.triu_indices(k, k, 1)
    gap = (H[:, pairs[0]] - H[:, pairs[1]]).abs().mean(1) if k > 1 else torch.zeros(n, dtype=torch.float64)
    return {"accuracy_original": float(correct[:, 0].double().mean()),
            "accuracy_paraphrased": float(correct[:, 1:].double().mean()) if k > 1 else float("nan"),
            "all_correct": float(correct.all(1).double().mean()), "same_answer": sum(same) / n,
            "entropy_gap": float(gap.mean()), "word_entropy": float(H.mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--problems", type=int, default=300)
    parser.add_argument("--k", type=int, default=8, help="wordings per problem, the task's own included")
    parser.add_argument("--seed", type=int, default=0, help="seed of the test problems and of their rewordings")
    parser.add_argument("--initial", action="store_true", help="evaluate the run's warm start instead")
    args = parser.parse_args()
    if args.k < 1 or args.problems < 1:
        raise SystemExit(f"--k and --problems must be at least 1, got {args.k} and {args.problems}")
    torch.set_num_threads(1)
    recipe = load_recipe(args.run / "config.yaml")
    task = build_task(recipe.task)
    if not hasattr(task, "paraphrases"):
        raise SystemExit(f"task {task.name!r} has no paraphrases(example, k, rng) method")
    rng = random.Random(args.seed)
    asks = [a for e in task.examples("test", args.problems, seed=args.seed)
            for a in (e, *task.paraphrases(e, args.k - 1, rng))]
    policy = run_policy(args.run, recipe, task, asks, args.initial)
    texts = completions(policy, asks, max_new_tokens(recipe, task))
    print(json.dumps({"run": str(args.run), "policy": "initial" if args.initial else "last checkpoint",
                      "problems": args.problems, "k": args.k, "seed": args.seed,
                      **consistency(task, texts, asks, args.k)}))


if __name__ == "__main__":
    main()
