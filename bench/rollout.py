"""Rollout throughput: polo's sampler vs ``model.generate`` vs the forward-pass floor.

Same model, same prompts (16 random character tokens), 32 new tokens, temperature 1, no top-k/top-p.
The floor is one batched forward per generated token with the KV cache and nothing else (no sampling,
no attention mask or position ids, no bookkeeping): 1 prefill + 31 one-token forwards, as in a sampler.
Fixed length: a model that never emits EOS; varying length: EOS with probability 1/24 per token, where polo
drops finished rows and ``generate`` keeps them to the end. Grouped: 32 distinct prompts × 8 samples (GRPO's
shape), where polo computes each prompt once and ``generate`` and the floor compute all 256.

``--regime long`` (issue #14): the base model (``--regime wide``: the 43.7M-parameter one with a 32k
vocabulary), prompts of 18 random characters (ladder-like), 32 rows, 128 and 256 new tokens (fixed; ≤ 256 with
EOS probability 1/256), 4 prompts × 8 samples at 256, and vLLM's engine (polo.engines.vllm_generator, in this
process, float32, prefix caching on) next to the others.

Each call's model FLOPs are counted as it runs (bench/limit.py; not vLLM's, whose model is its own); ``/ limit``
columns are the fraction of the machine's matmul throughput at the call's own GEMM shapes (the prefill's forward
GEMMs, the decode steps' one-token GEMMs), measured in the same run, that it achieved.

    python bench/rollout.py [--quick] [--regime long]
"""
from __future__ import annotations

import os

import torch
from transformers import DynamicCache

from common import CACHE_ARG, EOS_PROB, REGIME_OPTION, REGIMES, build_model, interleaved, median, paired_ratio, parse_args, \
    print_table, random_prompts
from limit import FlopCounter, Work, achieved, describe
from polo.policy.policy import Policy
from polo.engines.sampler import sample

PROMPT, NEW = 16, 32
LIMIT_COLUMNS = ["polo / limit", "generate / limit", "floor / limit"]
LONG_PROMPT = 18


@torch.no_grad()
def forward_floor(model, ids: torch.Tensor, new_tokens: int) -> None:
    """Prefill + ``new_tokens − 1`` one-token forwards on the whole batch, reusing the KV cache."""
    cache = DynamicCache(config=model.config)
    model(input_ids=ids, use_cache=True, logits_to_keep=1, **{CACHE_ARG: cache})
    last = ids[:, -1:]
    for _ in range(new_tokens - 1):
        model(input_ids=last, use_cache=True, logits_to_keep=1, **{CACHE_ARG: cache})


def vllm_engine(policy):
    """polo's vLLM engine serving ``policy`` (float32, in this process); torch stays on one thread."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from polo.engines.vllm_generator import VLLMGenerator, VLLMSettings

    engine = VLLMGenerator(VLLMSettings(), policy)
    torch.set_num_threads(1)
    return engine


def run_case(size: str, batch: int, eos_prob: float, reps: int, group: int = 1, new: int = NEW,
             prompt: int = PROMPT, vllm: bool = False) -> list:
    """``group`` > 1: ``batch / group`` distinct prompts, each repeated ``group`` times (GRPO's shape);
    ``vllm``: also time polo's vLLM engine."""
    model, tokenizer = build_model(size, eos_prob)
    policy = Policy(model, tokenizer)
    ids, mask = random_prompts(batch // group, prompt, len(tokenizer))
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    eos, generator = tokenizer.eos_token_id, torch.Generator().manual_seed(0)

    def polo() -> int:
        return int(sample(policy, ids, mask, max_new_tokens=new, generator=generator).response_mask.sum())

    @torch.no_grad()
    def generate() -> int:
        seq = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=new, temperature=1.0,
                             top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)[:, prompt:]
        is_eos = (seq == eos).long()
        return int((is_eos.cumsum(-1) - is_eos == 0).sum())  # tokens up to and including the first EOS

    def floor() -> int:
        forward_floor(model, ids, new)
        return batch * new

    cases = {"polo": polo, "generate": generate, "floor": floor}
    if vllm:
        engine = vllm_engine(policy)
        cases["vLLM"] = lambda: int(engine.generate(policy, ids, mask, max_new_tokens=new,
                                                    generator=generator).response_mask.sum())
    with FlopCounter(model) as counter:
        times, got = interleaved({name: counter.counted(fn) for name, fn in cases.items()}, reps)
    tokens = {name: [n for n, _ in runs] for name, runs in got.items()}
    works = {name: Work.of(work for _, work in got[name]) for name in ("polo", "generate", "floor")}
    tps = {k: [n / t for n, t in zip(tokens[k], times[k])] for k in times}
    mean_len = median(tokens["polo"]) / batch
    kind = f"fixed {new}" if eos_prob == 0 else f"<= {new}, EOS p={eos_prob:.3g}, mean {mean_len:.1f}"
    kind += f", {batch // group} prompts x {group}" if group > 1 else ""
    row = [size, batch, kind, median(tps["polo"]), median(tps["generate"]), median(tps["floor"]),
           paired_ratio(tps["polo"], tps["generate"]), paired_ratio(times["floor"], times["polo"]),
           *(achieved(work, sum(times[name]))[1] for name, work in works.items())]
    for name, work in works.items():
        print(f"  {size}, {batch}, {kind}, {name}: {describe(work, sum(times[name]))}", flush=True)
    if vllm:
        row += [median(tps["vLLM"]), paired_ratio(tps["polo"], tps["vLLM"])]
        engine.close()
    return row


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], reps={"type": int, "default": None, "help": "timed repetitions"},
                      regime=REGIME_OPTION)
    if args.regime != "short":
        return long_regime(REGIMES[args.regime].size, args.reps or (1 if args.quick else 3), args.quick)
    reps = args.reps or (2 if args.quick else 7)
    cases = [(size, batch, p, 1) for size in ("tiny", "small") for batch in (64, 256) for p in (0.0, EOS_PROB)]
    cases += [("tiny", 256, 0.0, 8), ("small", 256, 0.0, 8)]  # GRPO: 8 samples of a prompt share its prefill
    if args.quick:
        cases = [c for c in cases if c[1] == 64]
    rows = []
    for case in cases:
        size, batch, eos_prob, group = case
        rows.append(run_case(size, batch, eos_prob, reps, group))
        print(f"  {rows[-1][:3]} done", flush=True)
    print_table(f"rollout: prompt {PROMPT}, {NEW} new tokens, tokens/s (valid tokens) and ratios", [
        "model", "batch", "lengths", "polo tok/s", "generate tok/s", "floor tok/s",
        "polo/generate (tok/s)", "floor time / polo time", *LIMIT_COLUMNS], rows)
    print("\ntargets: floor time / polo time >= 0.95 at fixed length; polo/generate >= 1 everywhere. The floor "
          "always runs all rows for all 32 steps, so with EOS polo (which drops finished rows) can beat it.")


def long_regime(size: str, reps: int, quick: bool) -> None:
    """The base model (``--regime wide``: the wide one), 32 rows, 128 and 256 new tokens, with vLLM's engine (issue
    #14)."""
    cases = [(128, 0.0, 1), (256, 0.0, 1), (256, 1 / 256, 1), (256, 0.0, 8)]
    if quick:
        cases = [(128, 0.0, 1)]
    rows = []
    for new, eos_prob, group in cases:
        rows.append(run_case(size, 32, eos_prob, reps, group, new=new, prompt=LONG_PROMPT, vllm=True))
        print(f"  {rows[-1][:3]} done", flush=True)
    print_table(f"rollout, long regime: prompt {LONG_PROMPT}, tokens/s (valid tokens) and ratios (median of {reps})", [
        "model", "batch", "lengths", "polo tok/s", "generate tok/s", "floor tok/s", "polo/generate (tok/s)",
        "floor time / polo time", *LIMIT_COLUMNS, "vLLM tok/s", "polo/vLLM (tok/s)"], rows)
    print("\ntargets: floor time / polo time >= 0.95 at fixed length; polo/generate >= 1 everywhere")


if __name__ == "__main__":
    main()
