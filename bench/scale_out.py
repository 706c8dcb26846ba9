"""Scale-out engines side by side: GRPO steps per minute with the in-process sampler (the baseline), the vLLM
engine, 2 Ray rollout workers, asynchronous RL with staleness 1 and 2 data-parallel learner ranks (torchrun,
gloo), plus vLLM's log-prob mismatch.

The model is large enough that generation dominates a step: an untrained 4-layer, hidden-256 Llama (head size
64, which vLLM's CPU attention accepts) whose completions run to the 64-token cap; one step = 16 prompts × 8
completions × 64 tokens, 4 minibatches. Each configuration is a ``polo train`` run in its own process; a step's
wall time is the growth of ``elapsed_s`` between consecutive steps (this includes generation that asynchronous
RL hides behind the previous update), the first ``--warmup`` steps left out (vLLM's and Ray's start-up).
The learner runs on one torch thread (each data-parallel rank too); the Ray workers one thread each.

    python bench/scale_out.py [--steps 10] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = ["model.tiny.hidden_size=256", "model.tiny.num_layers=4", "model.tiny.num_heads=4",
         "model.tiny.intermediate_size=1024", "model.tiny.max_position_embeddings=128", "warm_start.steps=0"]
STEP = ["rollout.prompts_per_step=16", "rollout.samples_per_prompt=8", "rollout.max_new_tokens=64",
        "optim.lr=1e-6", "train.skip_zero_advantage_rows=false", "train.threads=1", "train.eval_size=16",
        "train.eval_every=1000", "train.save_every=1000"]
TORCHRUN = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29731"]
CONFIGS = {  # name: (recipe, overrides, launcher)
    "in-process sampler": ("grpo", [], []),
    "vLLM engine": ("grpo_vllm", [], []),
    "2 Ray rollout workers": ("grpo", ["dist.backend=ray", "dist.rollout_workers=2"], []),
    "async RL, staleness 1": ("grpo", ["train.async_staleness=1", "credit={name: rollout_is}"], []),
    "2 data-parallel ranks": ("grpo", [], TORCHRUN),
}
MISMATCH = ("mismatch/k1", "mismatch/k3", "mismatch/abs_log_ratio_mean", "mismatch/abs_log_ratio_max",
            "mismatch/ess", "mismatch/prob_diff_mean")


def run(recipe: str, overrides: list[str], launcher: list[str], steps: int, folder: Path) -> list[dict]:
    """One ``polo train`` run (under ``launcher``: torchrun); its metrics rows."""
    cmd = [sys.executable, *launcher, "-m", "polo.cli", "train", recipe, *MODEL, *STEP, f"train.steps={steps}",
           f"output_dir={folder}", *overrides]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = next(folder.glob("*/metrics.jsonl"))
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def step_seconds(rows: list[dict], warmup: int) -> list[float]:
    """Wall seconds of each step after the warm-up (the last step, which evaluates, left out)."""
    elapsed = [r["elapsed_s"] for r in rows if r["step"] >= 1]
    return [b - a for a, b in zip(elapsed[warmup:-2], elapsed[warmup + 1:-1])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    seconds = {name: [] for name in CONFIGS}
    mismatch = {k: [] for k in MISMATCH}
    for _ in range(args.repeats):  # the configurations interleaved, repeat by repeat
        for name, (recipe, overrides, launcher) in CONFIGS.items():
            with tempfile.TemporaryDirectory() as folder:
                rows = run(recipe, overrides, launcher, args.steps, Path(folder))
            seconds[name] += step_seconds(rows, args.warmup)
            if recipe == "grpo_vllm":
                for key in MISMATCH:
                    mismatch[key] += [r[key] for r in rows if key in r]
    base = statistics.median(seconds["in-process sampler"])
    print(f"GRPO step: 16 prompts x 8 x 64 tokens, 4-layer hidden-256 model; median of "
          f"{len(seconds['in-process sampler'])} steps per configuration")
    print(f"{'configuration':<24} {'s/step':>8} {'steps/min':>10} {'speed vs sampler':>17}")
    for name, values in seconds.items():
        s = statistics.median(values)
        print(f"{name:<24} {s:>8.2f} {60 / s:>10.1f} {base / s:>16.2f}x")
    print("\nvLLM vs trainer log-probs (median over steps):")
    for key, values in mismatch.items():
        print(f"  {key:<30} {statistics.median(values):.3g}  (max {max(values):.3g})")


if __name__ == "__main__":
    main()
