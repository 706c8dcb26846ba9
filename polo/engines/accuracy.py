"""Held-out accuracy: greedy and sampled, on the task's test split."""
from __future__ import annotations

from functools import partial

import torch

from polo.policy.policy import Policy
from polo.engines.sampler import sample
from polo.tasks.base import Example, Task


@torch.no_grad()
def completions(
    policy: Policy,
    examples: list[Example],
    max_new_tokens: int,
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    seed: int = 0,
    chunk: int = 512,
    generate=sample,
) -> list[str]:
    """The policy's completion of each example (the tool's replies included): greedy, or sampled from ``seed``
    (``generate``: polo's sampler or an engine's, with ``sample``'s signature)."""
    was_training = policy.training
    policy.eval()
    generator = torch.Generator().manual_seed(seed)
    texts: list[str] = []
    for start in range(0, len(examples), chunk):
        part = examples[start : start + chunk]
        ids, mask = policy.encode_prompts([e.prompt for e in part])
        out = generate(policy, ids, mask, max_new_tokens=max_new_tokens, temperature=temperature,
                       greedy=greedy, generator=generator, inputs=policy.prompt_inputs(part))
        texts += policy.decode(out.response_ids, out.text_mask)
    policy.train(was_training)
    return texts


def accuracy(policy: Policy, task: Task, examples: list[Example], max_new_tokens: int, **sampling) -> float:
    """Fraction of ``examples`` whose completion (``sampling``: see ``completions``; by default polo's sampler with
    the task's tool run during generation) the task's verifier accepts."""
    sampling.setdefault("generate", partial(sample, tool=task.tool()))
    texts = completions(policy, examples, max_new_tokens, **sampling)
    return sum(task.verify(texts, examples)) / max(1, len(examples))
