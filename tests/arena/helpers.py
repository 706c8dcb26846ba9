"""Arena test helpers: arena files on disk and finished run folders with made-up metrics."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from polo.arena import load_arena
from polo.arena.runner import mark_done, run_dir


def write_arena(path: Path, **fields) -> Path:
    """An arena file comparing grpo and rloo on seeds 0 and 1 (fields override the defaults)."""
    tree = {"name": "t", "seeds": [0, 1], "budget": {"steps": 3}, "target_accuracy": 0.5,
            "entries": [{"recipe": "grpo"}, {"recipe": "rloo"}]}
    tree.update(fields)
    path.write_text(yaml.safe_dump(tree))
    return path


def fake_run(out: Path, arena, label: str, seed: int, accuracies: list[float], eval_every: int = 2,
             step_s: float = 1.0) -> Path:
    """A finished run folder: an evaluation at step 0 and every ``eval_every`` steps, one row per step."""
    spec = next(r for r in arena.runs_of(label) if r.seed == seed)
    path = run_dir(out, spec)
    path.mkdir(parents=True)
    rows = [{"step": 0, "eval/greedy_accuracy": accuracies[0]}]
    for step in range(1, (len(accuracies) - 1) * eval_every + 1):
        row = {"step": step, "elapsed_s": step * step_s, "reward/total": 0.1 * step + seed, "train/accuracy": 0.5,
               "perf/tokens_per_s": 1000.0, "response/length": 3.0, "policy/entropy": 0.5, "policy/kl_old": 0.01,
               "policy/clip_frac_low": 0.01, "policy/clip_frac_high": 0.02, "frac_reward_zero_std": 0.25}
        if step % eval_every == 0:
            row["eval/greedy_accuracy"] = accuracies[step // eval_every]
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    mark_done(path)
    return path


def fake_arena(tmp_path: Path):
    """An arena of grpo vs rloo over seeds 0, 1, 2 whose runs are all made up and finished: grpo gains 0.1
    over rloo on every seed and reaches the 0.5 target; rloo reaches it on seeds 1 and 2 only."""
    arena = load_arena(write_arena(tmp_path / "a.yaml", seeds=[0, 1, 2]))
    out = tmp_path / "out"
    for seed, base in zip((0, 1, 2), (0.2, 0.3, 0.4)):
        fake_run(out, arena, "grpo", seed, [base, base + 0.2, base + 0.3])
        fake_run(out, arena, "rloo", seed, [base, base + 0.1, base + 0.2])
    return arena, out
