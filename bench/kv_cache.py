"""The sampler's KV cache: reserved buffers written in place (polo.policy.kv_cache, polo's) against Hugging Face's
``DynamicCache``, which appends by ``cat`` (the sampler before issue #33), on the same prompts and seeds.

32 rows of 18 random characters; fixed lengths (a model that never stops) and ≤ 256 with P(EOS) = 1/256 (rows
leave the batch); the outputs are checked to be identical bit for bit. One torch thread, interleaved repetitions.

    python bench/kv_cache.py [--quick] [--reps N]
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from common import build_model, case_table, interleaved, median, paired_ratio, random_prompts
from polo.engines.sampler import sample
from polo.policy import kv_cache, prefix
from polo.policy.policy import Policy

CASES = [("tiny", 32, 0.0), ("base", 128, 0.0), ("base", 256, 0.0), ("base", 256, 1 / 256), ("wide", 256, 0.0)]


def dynamic_cache(config, reserve: int) -> DynamicCache:
    return DynamicCache(config=config)


def run_case(size: str, new: int, eos_prob: float, reps: int) -> list:
    model, tokenizer = build_model(size, eos_prob)
    policy = Policy(model, tokenizer)
    ids, mask = random_prompts(32, 18, 40)

    def with_cache(make):
        def run():
            prefix.reserved_cache = make
            try:
                return sample(policy, ids, mask, max_new_tokens=new, generator=torch.Generator().manual_seed(0))
            finally:
                prefix.reserved_cache = kv_cache.reserved_cache
        return run

    times, out = interleaved({"DynamicCache": with_cache(dynamic_cache),
                              "reserved": with_cache(kv_cache.reserved_cache)}, reps)
    a, b = out["DynamicCache"][0], out["reserved"][0]
    same = torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logp, b.logp)
    lengths = f"fixed {new}" if eos_prob == 0 else f"<= {new}, mean {b.response_mask.sum(1).float().mean():.0f}"
    return [size, lengths, median(times["DynamicCache"]), median(times["reserved"]),
            paired_ratio(times["DynamicCache"], times["reserved"]), same]


def main() -> None:
    case_table(__doc__, CASES, run_case,
               "sampler, 32 rows: DynamicCache vs the reserved cache, seconds per call (medians of {reps})",
               ["model", "lengths", "DynamicCache s", "reserved s", "DynamicCache / reserved", "identical outputs"])


if __name__ == "__main__":
    main()
