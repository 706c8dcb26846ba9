"""Does a slate_rank policy pad its slate? Greedy slate precision, recall, F1 and size against the relevant set.

F-GRPO's slate phase is scored by recall (``task.slate_metric=recall``) or by F1 (``f1``); a recall reward is
maximised by listing every candidate. For each held-out problem of the run's ``slate_rank`` task, the greedy
answer is parsed (malformed answers count 0 on every score and are counted apart), then, averaged over
problems: precision ``|S ∩ Rel| / |S|``, recall ``|S ∩ Rel| / |Rel|``, F1, NDCG@rank_k, exact correctness, and the
padding ratio ``|S| / |Rel|`` over the well-formed answers (1 = no padding, pool / |Rel| = every candidate). Rows: the
run's starting model (step 0) and its newest checkpoint (or ``--step N``).

    python bench/slate_padding.py RUN_DIR [RUN_DIR ...] [--size 500] [--step N]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from polo.engines.accuracy import completions
from polo.tasks import build_task
from polo.tasks.slate_rank import SlateRank, f1, ndcg, recall
from polo.train.config import load_recipe
from polo.train.grue import run_policy
from polo.train.trainer import max_new_tokens


def slate_scores(task: SlateRank, texts: list[str], examples) -> dict:
    """The bench's averages (module docstring) of greedy answers ``texts`` to ``examples``."""
    rows, ratios, malformed = [], [], 0
    for text, example in zip(texts, examples):
        relevant = set(example.columns["relevant"])
        parsed = task.parse(text)
        if parsed is None:
            malformed += 1
            rows.append((0.0, 0.0, 0.0, 0.0, 0.0))
            continue
        slate, rank = parsed
        precision = len(set(slate) & relevant) / len(slate) if slate else 0.0
        rows.append((precision, recall(slate, relevant), f1(slate, relevant), ndcg(rank, relevant, task.rank_k),
                     float(task.is_correct(text, example))))
        ratios.append(len(slate) / len(relevant))
    means = torch.tensor(rows, dtype=torch.float64).mean(0).tolist()
    out = {name: round(v, 4) for name, v in zip(("precision", "recall", "f1", "ndcg", "exact"), means)}
    out.update(padding=round(sum(ratios) / len(ratios), 4) if ratios else None, malformed=malformed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders of slate_rank recipes")
    parser.add_argument("--size", type=int, default=500, help="held-out problems (default 500)")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the newest)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for run in args.runs:
        recipe = load_recipe(run / "config.yaml")
        task = build_task(recipe.task)
        if not isinstance(task, SlateRank):
            parser.error(f"{run} trains task {recipe.task['name']!r}; this bench reads slate_rank runs")
        examples = task.examples("test", args.size, seed=recipe.seed)
        out = {"run": str(run), "slate_metric": task.slate_metric}
        for label, step in (("start", 0), ("final", args.step)):
            policy, source = run_policy(run, recipe, task, step, log=lambda *_: None)
            texts = completions(policy, examples, max_new_tokens(recipe, task), greedy=True)
            out[label] = {"policy": source, **slate_scores(task, texts, examples)}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
