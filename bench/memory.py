"""Peak resident memory of one default ``polo train grpo`` step, and of TRL's GRPOTrainer on the same work.

Each measurement runs in a fresh subprocess (imports, build, one training step) and reports the process's
peak RSS (``ru_maxrss``), its RSS just before the step (after imports and construction) and the step's
increment (peak − before). polo: the ``grpo`` recipe on the warm-started built-in model (64 prompts × 8
completions of ≤ 4 tokens, one thread); TRL: the same model folder, prompts, rewards, group size and cap.

    pip install -e '.[bench]' && python bench/memory.py [--quick]
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import psutil

from common import DEFAULT_SETTING, addition_task, parse_args, polo_trainer, print_table, trl_trainer

MB = 1024 * 1024


def child(kind: str, model_dir: str) -> None:
    """Build ``kind``'s trainer, run one step, print the RSS numbers as one JSON line."""
    import torch

    torch.set_num_threads(1)
    if kind == "polo":
        trainer = polo_trainer(None, DEFAULT_SETTING)
        run = trainer.step
    else:
        trainer = trl_trainer(model_dir, DEFAULT_SETTING, steps=DEFAULT_SETTING.minibatches)  # one generation batch
        run = trainer.train
    before = psutil.Process().memory_info().rss / MB
    run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"kind": kind, "before": before, "peak": peak}))


def measure(kind: str, model_dir: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--model", model_dir],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], child={"choices": ["polo", "trl"]}, model={"default": ""},
                      reps={"type": int, "default": None, "help": "subprocesses per framework"})
    if args.child:
        return child(args.child, args.model)
    from polo.train.config import load_recipe
    from polo.train.warm_start import ensure_warm_start

    model_dir = str(ensure_warm_start(load_recipe("grpo"), addition_task(), log=lambda *a: None))
    reps = args.reps or (1 if args.quick else 3)
    runs = {kind: [measure(kind, model_dir) for _ in range(reps)] for kind in ("polo", "trl")}
    rows = []
    for kind, results in runs.items():
        best = min(results, key=lambda r: r["peak"])  # RSS does not suffer from CPU noise: min = least disturbed
        rows.append([kind, best["peak"], best["before"], best["peak"] - best["before"]])
    print_table(f"peak RSS, MiB, {DEFAULT_SETTING.name} (min of {reps} processes)",
                ["framework", "peak RSS", "RSS before the step", "step increment"], rows)
    print(f"\npolo / TRL peak RSS: {rows[0][1] / rows[1][1]:.3f}; step increment: {rows[0][3] / rows[1][3]:.3f}"
          "\ntarget: polo's peak RSS <= TRL's")


if __name__ == "__main__":
    main()
