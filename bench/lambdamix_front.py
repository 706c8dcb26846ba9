"""LambdaMix's Pareto front: a trained mixture evaluated along a grid of preference vectors, against single-objective
runs.

    python bench/lambdamix_front.py RUN [--baselines RUN_A RUN_B ...] [--points 11] [--examples 500] [--png OUT]

RUN is a ``lambdamix`` run folder (two objectives, ``roles.lambda_mix``). For λ = (w, 1 − w), w on ``--points``
evenly spaced values in [0, 1], its adapters are merged at λ (``LambdaMixPolicy.merged``) and the merged model answers
the task's held-out prompts greedily; each objective's mean reward is one point. The non-dominated points are the
front. Each baseline RUN (any recipe on the same task, e.g. plain LoRA GRPO on one objective) is evaluated the same
way and scored with RUN's objectives, as is the frozen base (λ = 0: adapters off). Printed: the grid table, each
baseline's point and whether some grid point weakly dominates it (at least as good on every objective); drawn: the
front and the baselines in a PNG (default RUN/lambdamix_front.png).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from polo.engines.accuracy import completions
from polo.tasks import build_task
from polo.tasks.rewards import RewardSpec, score
from polo.train.config import load_recipe
from polo.train.export import checkpoint_policy
from polo.train.trainer import max_new_tokens


def run_policy(run: Path):
    """The run's recipe and its policy at the newest checkpoint (``build_run_policy`` wraps it in the mixture)."""
    recipe = load_recipe(run / "config.yaml")
    return recipe, checkpoint_policy(run, recipe)[0].eval()


def objective_means(policy, task, examples, specs, max_new: int) -> list[float]:
    """Each objective's mean reward over greedy completions of ``examples``."""
    texts = completions(policy, examples, max_new, greedy=True)
    values, _, _ = score(task, specs, examples, texts)
    return values.mean(0).tolist()


def dominated_by(point: list[float], grid: list[list[float]]) -> list[int]:
    """Indices of the grid points at least as good as ``point`` on every objective."""
    return [i for i, g in enumerate(grid) if all(a >= b for a, b in zip(g, point))]


def front(grid: list[list[float]]) -> list[int]:
    """Indices of the non-dominated grid points (no other point at least as good everywhere and better somewhere)."""
    return [i for i, p in enumerate(grid)
            if not any(all(a >= b for a, b in zip(q, p)) and q != p for q in grid)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--baselines", type=Path, nargs="*", default=[])
    parser.add_argument("--points", type=int, default=11)
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--png", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    recipe, mix = run_policy(args.run)
    task = build_task(recipe.task)
    specs = [RewardSpec.of(s) for s in recipe.rewards]
    if len(specs) != 2 or mix.objectives != 2:
        raise SystemExit(f"{args.run}: expected a two-objective lambda_mix run, got rewards {[s.name for s in specs]}")
    names = [s.name for s in specs]
    examples = task.examples("test", args.examples, seed=recipe.seed)
    max_new = max_new_tokens(recipe, task)

    weights = torch.linspace(0, 1, args.points).tolist()
    grid = [objective_means(mix.merged([w, 1 - w]), task, examples, specs, max_new) for w in weights]
    on_front = set(front(grid))
    print(f"{'λ_' + names[0]:>12} {names[0]:>12} {names[1]:>12}  front")
    for w, (a, b), i in zip(weights, grid, range(len(grid))):
        print(f"{w:12.2f} {a:12.4f} {b:12.4f}  {'*' if i in on_front else ''}")

    start = objective_means(mix.merged([0.0, 0.0]), task, examples, specs, max_new)  # adapters off: the warm start
    print(f"base model (adapters off): {names[0]} {start[0]:.4f}, {names[1]} {start[1]:.4f}")
    baselines = []
    for run in args.baselines:
        _, policy = run_policy(run)
        point = objective_means(policy, task, examples, specs, max_new)
        by = dominated_by(point, grid)
        baselines.append((run.name, point))
        verdict = (f"weakly dominated by λ_{names[0]} = {', '.join(f'{weights[i]:.2f}' for i in by)}" if by
                   else "NOT dominated by any grid point")
        print(f"baseline {run.name}: {names[0]} {point[0]:.4f}, {names[1]} {point[1]:.4f}: {verdict}")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.plot([g[0] for g in grid], [g[1] for g in grid], "o-", color="tab:blue", label="LambdaMix, λ grid")
    for w, (a, b) in zip(weights, grid):
        ax.annotate(f"{w:.1f}", (a, b), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.plot([start[0]], [start[1]], "x", color="grey", markersize=9, label="base (adapters off)")
    for (name, (a, b)), marker in zip(baselines, "s^Dv"):
        ax.plot([a], [b], marker, markersize=9, label=name)
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.set_title(f"LambdaMix front (labels: λ_{names[0]}), {len(examples)} prompts", fontsize=10)
    ax.legend(fontsize=8)
    png = args.png or args.run / "lambdamix_front.png"
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"plot: {png}")


if __name__ == "__main__":
    main()
