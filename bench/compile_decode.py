"""Compiled decode (``rollout.compile_decode``): polo's sampler with its one-token steps through ``torch.compile``
against the same sampler eager, and the calls it takes for the compilation to pay back.

For each case a fresh model and policy; the compiled sampler's first call (compilation included: dynamo reset, and
an inductor cache that starts empty, a temporary ``TORCHINDUCTOR_CACHE_DIR``; later cases may reuse its kernels), then eager and compiled calls interleaved. Break-even
= extra seconds of the first call / seconds saved per later call. One torch thread.

    python bench/compile_decode.py [--quick] [--reps N]
"""
from __future__ import annotations

import os
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="polo-inductor-")  # before torch is imported

import torch  # noqa: E402

from common import build_model, case_table, interleaved, median, paired_ratio, random_prompts, timed  # noqa: E402
from polo.engines.sampler import sample  # noqa: E402
from polo.policy.policy import Policy  # noqa: E402

CASES = [("tiny", 64, 6, 32, 1 / 24), ("base", 32, 18, 128, 0.0), ("base", 32, 18, 256, 0.0),
         ("wide", 32, 18, 128, 0.0)]
"""(size, rows, prompt length, new tokens, EOS probability): the short regime's sampler and the long regime's."""


def run_case(size: str, rows: int, prompt: int, new: int, eos_prob: float, reps: int) -> list:
    torch._dynamo.reset()  # each case compiles anew (an earlier case's graphs would otherwise serve a same-sized model)
    model, tokenizer = build_model(size, eos_prob)
    policy = Policy(model, tokenizer)
    ids, mask = random_prompts(rows, prompt, 40)

    def call(compiled: bool):
        def run() -> int:
            policy.compile_decode = compiled
            out = sample(policy, ids, mask, max_new_tokens=new, generator=torch.Generator().manual_seed(0))
            return int(out.response_mask.sum())
        return run

    first, tokens = timed(call(True))
    times, got = interleaved({"eager": call(False), "compiled": call(True)}, reps)
    eager, compiled = median(times["eager"]), median(times["compiled"])
    saved = eager - compiled
    return [size, rows, f"{'fixed' if eos_prob == 0 else '<='} {new}", eager, compiled,
            paired_ratio(times["eager"], times["compiled"]), first,
            (first - compiled) / saved if saved > 0 else "never", tokens == median(got["compiled"])]


def main() -> None:
    case_table(__doc__, CASES, run_case, "compiled decode vs eager, polo's sampler, seconds per call (medians of {reps})",
               ["model", "rows", "new tokens", "eager s", "compiled s", "eager / compiled", "first compiled call s",
                "break-even calls", "same token count"])


if __name__ == "__main__":
    main()
