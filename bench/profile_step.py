"""Where a polo GRPO step's time goes: ``torch.profiler`` over whole ``Trainer.step()`` calls, by stage and by op.

The long regime's work by default (base model, 4 prompts × 8 samples of 8-digit ``addition_trace``, ≤ 256 tokens,
no skipping of zero-advantage rows; ``--regime wide``: the 43.7M-parameter model with a 32k vocabulary). Prints
the step's stages (``time/*`` of the trainer's metrics) and the ops with the most self CPU time, grouped into
families: the GEMMs (``mm``/``addmm``/``bmm``), attention (SDPA's kernels and their backward), KV-cache and index
copies, elementwise math, reductions and softmaxes, and the rest (optimizer, dispatch, Python).

    python bench/profile_step.py [--regime long|wide] [--tokens 128|256] [--steps N]
"""
from __future__ import annotations

import time
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from common import LONG_SETTINGS, REGIMES, parse_args, polo_trainer, print_table, save_model

FAMILIES = {
    "GEMM": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention": ("flash_attention", "scaled_dot_product", "_efficient_attention"),
    "copies": ("aten::copy_", "aten::cat", "aten::index", "aten::index_put", "aten::gather", "aten::scatter",
               "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::index_select"),
    "elementwise": ("aten::mul", "aten::add", "aten::sub", "aten::div", "aten::silu", "aten::neg", "aten::pow",
                    "aten::rsqrt", "aten::exp", "aten::where", "aten::masked_fill", "aten::sigmoid", "aten::clamp",
                    "aten::cos", "aten::sin", "aten::fill_", "aten::zero_", "aten::lerp", "aten::sqrt"),
    "reductions": ("aten::sum", "aten::mean", "aten::logsumexp", "aten::_softmax", "aten::_log_softmax",
                   "aten::max", "aten::amax", "aten::cumsum", "aten::norm", "aten::linalg_vector_norm"),
}


def family(name: str) -> str:
    for fam, prefixes in FAMILIES.items():
        if any(p in name for p in prefixes):
            return fam
    return "other"


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], regime={"choices": ["long", "wide"], "default": "long"},
                      tokens={"type": int, "default": 256, "choices": [128, 256]},
                      steps={"type": int, "default": 2, "help": "profiled steps (after one warm-up)"})
    regime = REGIMES[args.regime]
    setting = next(s for s in LONG_SETTINGS if s.max_tokens == args.tokens)
    trainer = polo_trainer(save_model(regime.size, setting.eos_prob), setting,
                           extra=("train.skip_zero_advantage_rows=false",), task=regime.task)
    trainer.step()
    stages: Counter = Counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            row = trainer.step()
            stages.update({k: v for k, v in row.items() if k.startswith("time/")})
        wall = time.perf_counter() - start
    by_family: Counter = Counter()
    ops = prof.key_averages()
    total = sum(op.self_cpu_time_total for op in ops)
    for op in ops:
        by_family[family(op.key)] += op.self_cpu_time_total
    print_table(f"{args.regime} regime, <= {args.tokens} tokens: stages (s per step, {args.steps} steps; wall "
                f"{wall / args.steps:.2f} s per step under the profiler)", ["stage", "s", "share"],
                [[k, v / args.steps, v / stages["time/step"]] for k, v in stages.most_common()])
    print_table("self CPU time by op family", ["family", "s per step", "share"],
                [[fam, t / 1e6 / args.steps, t / total] for fam, t in by_family.most_common()])
    print_table("top ops by self CPU time", ["op", "calls per step", "s per step", "share"],
                [[op.key, op.count // args.steps, op.self_cpu_time_total / 1e6 / args.steps,
                  op.self_cpu_time_total / total]
                 for op in sorted(ops, key=lambda o: -o.self_cpu_time_total)[:18]])


if __name__ == "__main__":
    main()
