"""PRS rewards for tool-integrated reasoning (Value-based Sampling Policy Optimization and Progressive Reward
Shaping, arXiv:2512.07478): a format stage, then answer quality.

With ``f`` the format score of ``polo.tasks.tool_calls`` (the fraction of calculator calls that match the
schema, times 1[answer tag present]) and ``q`` the answer's quality:

- ``prs``: ``R = −1 + f`` if ``f < 1``, else ``R = q`` with ``q = LA-BLEU(answer, reference)`` (short-form
  answers, ``polo.tasks.la_bleu``); in [−1, 1].
- ``prs_format``: ``f − 1`` in [−1, 0], the format stage alone; with the ``prs_judge`` shaping term (which adds
  ``1[f = 1]·judge_score/max_score``) it makes PRS for long-form answers judged by the ``judge`` role.
- ``tool_format``: ``f``; ``la_bleu``: ``q`` of the tagged answer (0 without one).
"""
from __future__ import annotations

import torch

from polo.core.shaping.prs import progressive_reward
from polo.tasks.la_bleu import la_bleu
from polo.tasks.rewards import completion_texts, register_reward
from polo.tasks.tool_calls import format_score, tagged_answer


def answer_quality(completion: str, reference: str) -> float:
    """LA-BLEU of the tagged answer against the reference, 0 without an answer tag."""
    answer = tagged_answer(completion)
    return 0.0 if answer is None else la_bleu(answer, str(reference))


@register_reward("prs", max_value=1.0)
def prs(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    texts = completion_texts(completions)
    f = torch.tensor([format_score(t) for t in texts], dtype=torch.float64)
    q = torch.tensor([answer_quality(t, a) for t, a in zip(texts, answer)], dtype=torch.float64)
    return progressive_reward(f, q).tolist()


@register_reward("prs_format", max_value=0.0)
def prs_format(prompts: list, completions: list, **kwargs) -> list[float]:
    return [format_score(t) - 1.0 for t in completion_texts(completions)]


@register_reward("tool_format", max_value=1.0)
def tool_format(prompts: list, completions: list, **kwargs) -> list[float]:
    return [format_score(t) for t in completion_texts(completions)]


@register_reward("la_bleu", max_value=1.0)
def la_bleu_reward(prompts: list, completions: list, answer: list, **kwargs) -> list[float]:
    return [answer_quality(t, a) for t, a in zip(completion_texts(completions), answer)]
