"""Paraphrase groups: a GRPO group made of K rewordings of one problem instead of G samples of one prompt."""
from __future__ import annotations

import random

import torch
from pydantic import Field

from polo.core.model_prompts import ModelPrompts
from polo.core.registry import ConfigError
from polo.prompt_samplers.base import PROMPT_SAMPLERS, PromptSampler


@PROMPT_SAMPLERS.register("paraphrase_group")
class ParaphraseGroup(PromptSampler):
    """Each of the step's ``n`` problems becomes one group of ``k`` equivalent prompts: the problem as the task
    wrote it (``include_original``) and rewordings of it, every prompt rolled out on its own (no shared context)
    with ``rollout.samples_per_prompt`` samples (the paper's setting is 1: one response per paraphrase). The
    group, the unit of the advantage's baseline, is the problem: its ``k × samples_per_prompt`` rows are
    contiguous and share one ``group`` id, and the engine's ``prompt_index`` of every row is the problem's index
    in the training pool. Rows are trained under the prompt they were sampled with.

    The rewordings come from the task: an optional method ``paraphrases(example, k, rng) -> list[Example]``
    returning ``k`` examples that ask the same question in other words (same ``answer`` and columns; a
    ``random.Random`` chooses the wording). ``word_problems`` has one (``polo.tasks.word_problem_paraphrases``), and
    ``longest_paraphrase(example)``, the longest rewording, which the context check reads.
    A task without it is refused on the first step, naming the task. The wording ``rng`` is seeded from the
    step's generator, which the run checkpoints, so a resumed run draws the same paraphrases; the sampler keeps
    no state of its own.

    Paper: Information-Consistent Language Model Recommendations through Group Relative Policy Optimization
    (arXiv:2512.12858): equivalent phrasings of one question form the GRPO group, each answered with a fresh
    context. Reconstructed from its abstract and a reading note.
    """

    paper = "Information-Consistent Language Model Recommendations through Group Relative Policy Optimization " \
            "(arXiv:2512.12858)"
    provenance = "RECONSTRUCTED"

    k: int = Field(4, ge=1)
    """Prompts per group (K), the original included when ``include_original``."""
    include_original: bool = True
    """The task's own wording is one of the K prompts (else K rewordings)."""

    def model_prompts(self, key: str, query) -> list[ModelPrompts]:
        """The rewordings this sampler writes, each followed by a response: each example's longest one where the task
        says it (``longest_paraphrase(example)``), else one seeded draw of them (a task without ``paraphrases`` is
        refused on the first step)."""
        paraphrase = getattr(query.task, "paraphrases", None)
        if paraphrase is None:
            return []
        longest = getattr(query.task, "longest_paraphrase", None)
        if longest is not None:
            prompts = [longest(example) for example in query.examples]
        else:
            rng = random.Random(0)
            rewrites = self.k - self.include_original
            prompts = [p for example in query.examples for p in paraphrase(example, rewrites, rng)]
        return [ModelPrompts(f"{key}.{self.registry_name}", "the longest rewording", "the task's paraphrases",
                             "shorten the task's problems", prompts, [(query.max_new, "response tokens")])]

    def collect(self, stream, generate, n_prompts, generator, components):
        task = components["engine"].settings.task
        paraphrase = getattr(task, "paraphrases", None)
        if paraphrase is None:
            raise ConfigError(f"prompt_sampler paraphrase_group needs a task with a paraphrases(example, k, rng) "
                              f"method; task {task.name!r} has none")
        examples, index = stream.next(n_prompts)
        rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
        rewrites = self.k - self.include_original
        asks = []
        for example in examples:
            variants = paraphrase(example, rewrites, rng)
            if len(variants) != rewrites or any(v.answer != example.answer for v in variants):
                raise ValueError(f"task {task.name!r}: paraphrases(example, {rewrites}, rng) must return {rewrites} "
                                 f"examples with the original's answer {example.answer!r}, got "
                                 f"{[v.answer for v in variants]}")
            asks.extend([example] * self.include_original + variants)
        got = generate(asks, [i for i in index for _ in range(self.k)])
        per_prompt = torch.unique_consecutive(got.batch.group, return_inverse=True)[1]  # 0.. in the order of asks
        got.batch.group = torch.div(per_prompt, self.k, rounding_mode="floor")
        distinct = len({e.prompt for e in asks})
        return got, {"sampler/distinct_prompts_frac": distinct / len(asks)}
