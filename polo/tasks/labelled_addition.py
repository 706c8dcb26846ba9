"""``labelled_addition``: ``addition`` whose examples carry a binary ``label``, the built-in stand-in for VULPO's
labelled vulnerability data (polo/inputs/example_inputs.py: ``prompt_label`` reads the column).

``label`` is ``vul`` when the sum is odd, ``safe`` when it is even (about half each). A completion's verdict is
the parity of the number it writes, so a rule judge can score VULPO's three criteria on one answer: the verdict
(the label's parity), the location (per-digit credit) and the whole finding (the exact sum). Rewards, besides
``addition``'s:

- ``verdict``: 1.0 iff the completion is a number whose parity is the label's (odd for ``vul``);
- ``format``: 1.0 iff the completion is a number (digits only).

The prompts, answers, split and default rewards are ``addition``'s.
"""
from __future__ import annotations

import random
from dataclasses import replace

from polo.tasks.addition import Addition
from polo.tasks.base import Example
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, completion_texts

PARITY = {"vul": 1, "safe": 0}
"""The sum's parity of each label."""


@register_task("labelled_addition")
class LabelledAddition(Addition):
    """Multi-digit addition with a ``label`` column: ``vul`` for an odd sum, ``safe`` for an even one."""

    def sample(self, rng: random.Random) -> Example:
        example = super().sample(rng)
        return replace(example, columns={**example.columns, "label": "vul" if int(example.answer) % 2 else "safe"})

    def verdict_reward(self, prompts: list[str], completions: list[str], label: list[str], **kwargs) -> list[float]:
        """Reward ``verdict``: 1.0 iff the completion is a number of the label's parity."""
        return [float(c.strip().isdigit() and int(c.strip()) % 2 == PARITY[y])
                for c, y in zip(completion_texts(completions), label)]

    def format_reward(self, prompts: list[str], completions: list[str], **kwargs) -> list[float]:
        """Reward ``format``: 1.0 iff the completion is digits only."""
        return [float(c.strip().isdigit()) for c in completion_texts(completions)]

    def task_rewards(self) -> dict[str, RewardFn]:
        return {**super().task_rewards(), "verdict": self.verdict_reward, "format": self.format_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "verdict": 1.0, "format": 1.0}
