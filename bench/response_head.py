"""The update's forward + backward with the lm_head on the response tokens only (polo.policy.head, the default)
against the model's own ``[B, T, V]`` logits (the path before it), same rows, interleaved.

Rows: 32 (4 prompts × 8 of 18 characters), responses of geometric length under the cap (P(EOS) = 1/cap, as in
the long regime: mean ≈ 0.63 × cap), random tokens. Models: ``base`` (character vocabulary, 100 tokens) and
``wide`` (43.7M parameters, 32,000 tokens). Each repetition: ``forward_logp`` with the entropy metric, then the
backward of the summed log-probs. One torch thread; ratios are medians of paired repetitions.

    python bench/response_head.py [--quick] [--reps N]
"""
from __future__ import annotations

import torch

from common import build_model, case_table, interleaved, median, paired_ratio, random_prompts
from polo.policy.policy import Policy

CASES = [("base", 128), ("base", 256), ("wide", 128), ("wide", 256)]


def rows(cap: int, vocab: int, seed: int = 0):
    """4 prompts × 8 of 18 random characters, responses of geometric length ≤ ``cap`` of random tokens."""
    g = torch.Generator().manual_seed(seed)
    ids, mask = random_prompts(4, 18, 40, seed)
    ids, mask = ids.repeat_interleave(8, 0), mask.repeat_interleave(8, 0)
    lengths = torch.distributions.Geometric(probs=torch.tensor(1 / cap)).sample((32,)).long().add(1).clamp(max=cap)
    response = torch.randint(4, vocab, (32, cap), generator=g)
    return ids, mask, response, (torch.arange(cap) < lengths[:, None]).long()


def run_case(size: str, cap: int, reps: int) -> list:
    model, tokenizer = build_model(size, None)
    policy = Policy(model, tokenizer).train()
    torch.manual_seed(0)
    batch = rows(cap, len(tokenizer))
    head = Policy.response_head

    def update(plain: bool):
        def run() -> None:
            policy.response_head = (lambda: None) if plain else head.__get__(policy)
            out = policy.forward_logp(*batch, return_entropy="metric")
            out["logp"].sum().backward()
            policy.zero_grad(set_to_none=True)
        return run

    times, _ = interleaved({"model's logits": update(True), "response head": update(False)}, reps)
    B, T = batch[2].shape
    return [size, len(tokenizer), cap, int(batch[3].sum()), median(times["model's logits"]),
            median(times["response head"]), paired_ratio(times["model's logits"], times["response head"]),
            B * T * len(tokenizer) * 4 / 2**20]


def main() -> None:
    case_table(__doc__, CASES, run_case, "update forward + backward, 32 rows, seconds (medians of {reps})",
               ["model", "vocab", "cap", "response tokens", "model's logits s", "response head s", "model's / head",
                "[B, T, V] float32 MB not kept"], quick=lambda cases: cases[::2])


if __name__ == "__main__":
    main()
