"""Tasks with reasoning traces: the completion works the problem step by step, then gives its answer after
the marker ``####`` (GSM8K's convention)::

    <trace: one step per line>
    #### <answer>

The warm start learns from demonstrations written that way (``trace(example)`` + marker + answer), and the
task's verifier reads only the text after the first marker (``final_answer``), so a trace may go wrong
and be corrected, and a completion without the marker is wrong. The ``reasoning_mask`` input and every
component that splits reasoning from answer find the span through ``answer_marker``.

Rewards of every traced task: ``correct`` (the verifier on the final answer, 1.0 or 0.0; the default
and only reward, so groups are all-right or all-wrong as often as in the users' regime) and ``format``
(1.0 iff the marker is followed by a non-empty answer). Subclasses implement ``sample``, ``trace`` and
``max_completion_chars`` (a bound on the demonstration's length) and may override ``answer_correct``.
"""
from __future__ import annotations

from typing import ClassVar

from polo.tasks.base import Example, Task
from polo.tasks.rewards import RewardFn, RewardSpec, completion_texts

MARKER = "####"


def final_answer(completion: str) -> str | None:
    """The stripped text after the first ``####`` of ``completion``; None when there is no marker."""
    at = completion.find(MARKER)
    return None if at < 0 else completion[at + len(MARKER):].strip()


class TracedTask(Task):
    """A generated task whose demonstrations are ``trace + "\\n#### " + answer``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("correct", 1.0)]
    answer_marker: ClassVar[str | None] = MARKER

    def trace(self, example: Example) -> str:
        """The worked steps that lead to ``example.answer`` (no marker, no answer line)."""
        raise NotImplementedError

    def demonstration(self, example: Example) -> str:
        return f"{self.trace(example)}\n{MARKER} {example.answer}"

    def answer_correct(self, answer: str, example: Example) -> bool:
        """Whether a final answer (stripped, non-empty) solves ``example``: an exact match by default."""
        return answer == example.answer

    def is_correct(self, completion: str, example: Example) -> bool:
        answer = final_answer(completion)
        return bool(answer) and self.answer_correct(answer, example)

    def format_reward(self, prompts: list[str], completions: list, **kwargs) -> list[float]:
        """Reward ``format``: 1.0 iff the completion has the marker followed by a non-empty answer."""
        return [float(bool(final_answer(c))) for c in completion_texts(completions)]

    def task_rewards(self) -> dict[str, RewardFn]:
        return {**super().task_rewards(), "format": self.format_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "format": 1.0}
