"""Think-then-answer completions, ``<think>c</think><answer>a</answer>``: parsing and two rewards.

- ``think_answer_format``: ``r_fmt = 1`` if the whole completion is one ``<think>…</think>`` block then one
  ``<answer>…</answer>`` block (whitespace allowed around and between them), else 0 (RAPO's format reward,
  arXiv:2509.21871; Con-GRPO's format check, arXiv:2602.01081).
- ``think_consistency``: Con-GRPO's consistency term with the built-in rule judge,
  ``r_con·r_fmt`` where ``r_con = 1[the last number the reasoning c states = the number the answer a states]``:
  the rule judge reads only the reasoning and takes its last number as the conclusion it implies (MedAD-R1,
  "Con-GRPO", arXiv:2602.01081, reconstructed from the abstract; the rule judge is polo's stand-in for the
  paper's frozen LLM judge, for tasks whose answer is a number). A non-numeric answer scores 0.
"""
from __future__ import annotations

import math
import re

from polo.tasks.rewards import completion_texts, register_reward

_FORMAT = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")


def think_and_answer(text: str) -> tuple[str, str] | None:
    """``(c, a)`` of a well-formed ``<think>c</think><answer>a</answer>`` completion, else None."""
    match = _FORMAT.fullmatch(text)
    return None if match is None else (match.group(1), match.group(2))


def answer_text(text: str) -> str:
    """The content of the first ``<answer>…</answer>`` block, or the whole completion when it has none."""
    match = _ANSWER.search(text)
    return match.group(1) if match else text


def as_number(text: str) -> float | None:
    """``text`` (stripped) read as one decimal number (``0.7``, ``.5``, ``3``), else None (also for NaN/inf)."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def last_number(text: str) -> float | None:
    """The last decimal number written in ``text``, else None."""
    found = _NUMBER.findall(text)
    return float(found[-1]) if found else None


def consistent(text: str) -> float:
    """The rule judge's ``r_con·r_fmt`` of one completion (see the module docstring)."""
    parts = think_and_answer(text)
    if parts is None:
        return 0.0
    conclusion, answer = last_number(parts[0]), as_number(parts[1])
    return float(conclusion is not None and answer is not None and math.isclose(conclusion, answer, abs_tol=1e-9))


@register_reward("think_answer_format", max_value=1.0)
def think_answer_format(prompts: list, completions: list, **kwargs) -> list[float]:
    """1.0 for a ``<think>…</think><answer>…</answer>`` completion, else 0.0."""
    return [float(think_and_answer(t) is not None) for t in completion_texts(completions)]


@register_reward("think_consistency", max_value=1.0, provenance="RECONSTRUCTED",
                 paper="MedAD-R1: Eliciting Consistent Reasoning in Interpretible Medical Anomaly Detection via "
                       "Consistency-Reinforced Policy Optimization (arXiv:2602.01081)")
def think_consistency(prompts: list, completions: list, **kwargs) -> list[float]:
    """1.0 for a well-formed completion whose reasoning's last number is its answer, else 0.0."""
    return [consistent(t) for t in completion_texts(completions)]
