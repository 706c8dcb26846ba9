"""RAPO's acceptance measurement: how well a policy's greedy predicted scores rank held-out items.

For each held-out example of the run's task (``shape_score``: an image with a true score in its ``score``
column), the policy predicts a score greedily; the number is read as RAPO's rewards read it (the ``<answer>``
block, else the whole completion, as one decimal number). Reported per model: Spearman's ρ and Kendall's τ-b of
predicted vs true scores over the parseable predictions, their mean absolute error, and how many predictions
were unparseable (counted, then left out); a model that predicts one constant score ranks nothing (ρ and τ
null). The models: the run's starting model (its warm start, step 0) and its newest checkpoint (or ``--step N``);
or one model folder with ``--task``.

    python bench/rapo_rank_corr.py RUN_DIR [--size 300] [--step N]
    python bench/rapo_rank_corr.py MODEL_DIR --task shape_score --kind vision [--size 300]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from polo.policy.kinds import policy_class
from polo.engines.accuracy import completions
from polo.tasks import build_task
from polo.tasks.think_answer import answer_text, as_number
from polo.train.config import load_recipe
from polo.train.grue import run_policy
from polo.train.trainer import max_new_tokens


def ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of ``x`` with ties given their average rank."""
    less = (x[None, :] < x[:, None]).sum(1).double()
    equal = (x[None, :] == x[:, None]).sum(1).double()
    return less + (equal + 1) / 2


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson correlation of the average ranks (NaN when either side is constant)."""
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))


def kendall_tau_b(x: torch.Tensor, y: torch.Tensor) -> float:
    """``(C − D) / sqrt((n0 − n1)(n0 − n2))`` over all pairs, ties in x (n1) and in y (n2) corrected."""
    sx, sy = torch.sign(x[:, None] - x[None, :]), torch.sign(y[:, None] - y[None, :])
    upper = torch.triu(torch.ones_like(sx, dtype=torch.bool), 1)
    concordance = (sx * sy)[upper].sum()
    pairs_x, pairs_y = (sx[upper] != 0).sum(), (sy[upper] != 0).sum()
    return float(concordance / torch.sqrt(pairs_x.double() * pairs_y.double()))


def measure(policy, task, examples, max_new: int) -> dict:
    texts = completions(policy, examples, max_new, greedy=True)
    predicted = [as_number(answer_text(t)) for t in texts]
    kept = [(p, float(e.columns["score"])) for p, e in zip(predicted, examples) if p is not None]
    row = {"examples": len(examples), "unparseable": len(examples) - len(kept), "spearman": None, "kendall": None,
           "sample": texts[:4]}
    if kept:
        o, s = torch.tensor(kept, dtype=torch.float64).T
        row.update(mae=round(float((o - s).abs().mean()), 4), distinct_predictions=len(set(o.tolist())))
        if row["distinct_predictions"] > 1 and len(set(s.tolist())) > 1:  # else no ranking: null
            row.update(spearman=round(spearman(o, s), 4), kendall=round(kendall_tau_b(o, s), 4))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a run folder (config.yaml), or a model folder with --task")
    parser.add_argument("--size", type=int, default=300, help="held-out examples (default 300)")
    parser.add_argument("--step", type=int, help="checkpoint step of the run (default: the newest)")
    parser.add_argument("--task", help="task name, for a model folder")
    parser.add_argument("--kind", default="vision", help="policy kind of a model folder (default vision)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out examples, for a model folder")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if (args.path / "config.yaml").is_file():
        recipe = load_recipe(args.path / "config.yaml")
        task = build_task(recipe.task)
        examples = task.examples("test", args.size, seed=recipe.seed)
        max_new = max_new_tokens(recipe, task)
        start, _ = run_policy(args.path, recipe, task, 0)
        final, source = run_policy(args.path, recipe, task, args.step)
        out = {"run": str(args.path), "start": measure(start, task, examples, max_new),
               Path(source).name: measure(final, task, examples, max_new)}
    else:
        if not args.task:
            parser.error("a model folder needs --task")
        task = build_task(args.task)
        examples = task.examples("test", args.size, seed=args.seed)
        policy = policy_class(args.kind).load(args.path)
        out = {"model": str(args.path), "model_result": measure(policy, task, examples, task.max_completion_chars + 1)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
