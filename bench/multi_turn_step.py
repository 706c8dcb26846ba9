"""Multi-turn step overhead: the share of a ``gigpo`` training step spent outside the model's forward and
backward passes (environment stepping, context rendering, tokenization, sampling bookkeeping, batch assembly,
advantages, the optimizer step).

One step = 16 TextGrid-v0 seeds × 8 episodes on the built-in model (the shipped ``gigpo`` recipe, its cached
warm start). Model time is measured by wrapping the transformer trunk's and the LM head's ``forward`` (every
decode step of the sampler, every log-prob forward of the update) and ``Tensor.backward``; everything else in
``Trainer.step`` is overhead. The issue's target: less than 15 %.

    python bench/multi_turn_step.py [--quick]
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from common import median, parse_args
from polo.train.config import load_recipe
from polo.train.trainer import Trainer


class ModelClock:
    """Seconds spent inside the wrapped forwards and in ``Tensor.backward`` since the last ``reset``."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.seconds = 0.0
        for module in modules:
            module.forward = self.timed(module.forward)
        torch.Tensor.backward = self.timed(torch.Tensor.backward)

    def timed(self, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
        return wrapper


def main() -> None:
    args = parse_args(__doc__)
    steps = 3 if args.quick else 8
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(load_recipe("gigpo"), Path(tmp) / "run", log=lambda *_: None)
        hf = trainer.policy.hf_model
        clock = ModelClock([hf.model, hf.lm_head])
        shares, totals = [], []
        for i in range(steps + 1):
            clock.seconds = 0.0
            start = time.perf_counter()
            trainer.step()
            trainer.step_count += 1
            total = time.perf_counter() - start
            if i:  # the first step warms allocator and caches
                shares.append(1 - clock.seconds / total)
                totals.append(total)
    print(f"gigpo step, 16 seeds x 8 episodes, {steps} steps after one warm-up (one thread)")
    print(f"step time (median)            {median(totals):8.2f} s")
    print(f"outside forward/backward      {100 * median(shares):8.1f} %   (target < 15 %; "
          f"min {100 * min(shares):.1f}, max {100 * max(shares):.1f})")


if __name__ == "__main__":
    main()
