"""Peak resident memory of one default ``polo train grpo`` step, and of TRL's GRPOTrainer on the same work.

Each measurement runs in a fresh subprocess (imports, build, one training step) and reports the process's
peak RSS (``ru_maxrss``), its RSS just before the step (after imports and construction) and the step's
increment (peak − before). polo: the ``grpo`` recipe on the warm-started built-in model (64 prompts × 8
completions of ≤ 4 tokens, one thread); TRL: the same model folder, prompts, rewards, group size and cap.
``--regime long`` (issue #14): one step of 4 × 8 completions of ≤ 256 tokens on the base model (P(EOS) = 1/256,
8-digit ``addition_trace`` prompts), both frameworks from the same folder, polo without skipping; each framework
twice: without gradient checkpointing and with it (TRL's default; polo ``train.gradient_checkpointing``), which
trades a recomputed forward for activation memory. Ratios compare like with like.

    pip install -e '.[bench]' && python bench/memory.py [--quick] [--regime long]
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import psutil

from common import DEFAULT_SETTING, REGIME_OPTION, REGIMES, load_task, parse_args, polo_trainer, print_table, \
    save_model, trl_trainer

MB = 1024 * 1024
CKPT = ", grad ckpt"
KINDS = ("polo", "trl")
CKPT_KINDS = ("polo" + CKPT, "trl" + CKPT)


def child(kind: str, model_dir: str, regime: str) -> None:
    """Build ``kind``'s trainer, run one step, print the RSS numbers as one JSON line."""
    import torch

    torch.set_num_threads(1)
    setting, task = (DEFAULT_SETTING, REGIMES["short"].task) if regime == "short" else (
        REGIMES[regime].settings[-1], REGIMES[regime].task)
    if kind.startswith("polo"):
        polo_dir = None if regime == "short" else model_dir  # short: the warm-started default model
        extra = () if regime == "short" else ("train.skip_zero_advantage_rows=false",)
        extra += ("train.gradient_checkpointing=true",) if kind.endswith(CKPT) else ()
        trainer = polo_trainer(polo_dir, setting, extra=extra, task=task)
        run = trainer.step
    else:  # one generation batch; "trl, grad ckpt": TRL's default gradient checkpointing
        config = {} if kind.endswith(CKPT) else REGIMES[regime].trl
        trainer = trl_trainer(model_dir, setting, steps=setting.minibatches, task=task, config=config)
        run = trainer.train
    before = psutil.Process().memory_info().rss / MB
    run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"kind": kind, "before": before, "peak": peak}))


def measure(kind: str, model_dir: str, regime: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--model", model_dir, "--regime", regime],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], child={"choices": [*KINDS, *CKPT_KINDS]}, model={"default": ""},
                      reps={"type": int, "default": None, "help": "subprocesses per framework"}, regime=REGIME_OPTION)
    if args.child:
        return child(args.child, args.model, args.regime)
    from polo.train.config import load_recipe
    from polo.train.warm_start import ensure_warm_start

    if args.regime == "short":
        model_dir = str(ensure_warm_start(load_recipe("grpo"), load_task(), log=lambda *a: None))
    else:
        model_dir = str(save_model(REGIMES[args.regime].size, REGIMES[args.regime].settings[-1].eos_prob))
    reps = args.reps or (3 if args.regime == "short" and not args.quick else 1)
    kinds = KINDS if args.regime == "short" else (*KINDS, *CKPT_KINDS)
    runs = {kind: [measure(kind, model_dir, args.regime) for _ in range(reps)] for kind in kinds}
    rows = []
    for kind, results in runs.items():
        best = min(results, key=lambda r: r["peak"])  # RSS does not suffer from CPU noise: min = least disturbed
        rows.append([kind, best["peak"], best["before"], best["peak"] - best["before"]])
    setting = DEFAULT_SETTING if args.regime == "short" else REGIMES[args.regime].settings[-1]
    print_table(f"peak RSS, MiB, {args.regime} regime, {setting.name} (min of {reps} processes)",
                ["framework", "peak RSS", "RSS before the step", "step increment"], rows)
    by_kind = {row[0]: row for row in rows}
    for polo, trl in (KINDS, CKPT_KINDS):  # like with like
        if polo in by_kind:
            p, t = by_kind[polo], by_kind[trl]
            print(f"{polo} / {trl} peak RSS: {p[1] / t[1]:.3f}; step increment: {p[3] / t[3]:.3f}")
    print("target: polo's peak RSS <= TRL's" + (" (issue #14: <= 0.8 x TRL's)" if args.regime == "long" else ""))


if __name__ == "__main__":
    main()
