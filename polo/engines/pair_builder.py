"""Preference pairs from a task's verifier: sample G completions per prompt and pair a verified-correct one
(chosen) with an incorrect one (rejected); ``polo pairs TASK --out pairs.jsonl`` writes them for the
``preference_pairs`` task."""
from __future__ import annotations

import torch

from polo.policy.policy import Policy
from polo.engines.sampler import sample
from polo.tasks.base import Example, Task

CHUNK = 64
"""Prompts sampled per call (× G rows)."""


def pair_row(example: Example, chosen: str, rejected: str) -> dict:
    """One JSONL row: the prompt (its chat messages for a conversational example), the pair, the answer and
    the example's extra columns (what the task's verifier reads)."""
    prompt = [dict(m) for m in example.messages] if example.messages is not None else example.prompt
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "answer": example.answer, **example.columns}


@torch.no_grad()
def build_pairs(policy: Policy, task: Task, examples: list[Example], samples_per_prompt: int, max_new_tokens: int,
                generator: torch.Generator, temperature: float = 1.0) -> list[dict]:
    """For each distinct prompt of ``examples``, ``samples_per_prompt`` sampled completions; a row (``pair_row``)
    for every prompt with at least one completion ``task.is_correct`` accepts and one it rejects: the first of
    each in sampling order. Prompts whose samples are all correct or all wrong give no row."""
    if samples_per_prompt < 2:
        raise ValueError(f"a pair needs at least 2 samples per prompt, got {samples_per_prompt}")
    distinct = list({e.prompt: e for e in examples}.values())
    was_training = policy.training
    policy.eval()
    rows = []
    for start in range(0, len(distinct), CHUNK):
        chunk = distinct[start:start + CHUNK]
        ids, mask = policy.encode_prompts(chunk)
        ids, mask = ids.repeat_interleave(samples_per_prompt, 0), mask.repeat_interleave(samples_per_prompt, 0)
        out = sample(policy, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature, generator=generator)
        texts = policy.decode(out.response_ids, out.response_mask)
        for i, example in enumerate(chunk):
            group = texts[i * samples_per_prompt:(i + 1) * samples_per_prompt]
            verdicts = [task.is_correct(t, example) for t in group]
            if any(verdicts) and not all(verdicts):
                rows.append(pair_row(example, group[verdicts.index(True)], group[verdicts.index(False)]))
    policy.train(was_training)
    return rows
