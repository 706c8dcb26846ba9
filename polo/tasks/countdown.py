"""``countdown``: combine the given numbers into an expression that equals the target.

Prompt ``"3 5 7>56:"`` (the numbers sorted, then the target); a correct completion is an expression
such as ``"(3+5)*7"`` that uses each given number at most once (as a multiset), written with integers,
``+ - * /`` and parentheses, every division exact (``polo.tasks.expression``; nothing is ``eval``-ed).
Targets are reachable by construction: a random left-to-right expression over all ``count`` numbers
(values ``1..max_value``) with ``+ - *`` is drawn until its value is positive, and kept as the
demonstration (column ``solution``). Columns: ``numbers`` (tuple of ints), ``solution`` (str).

Rewards (``v`` = value of the completion, ``t`` = target, "valid" = parses and uses only given numbers):

- ``correct``: 1.0 if valid and ``v == t``.
- ``format``: 1.0 if valid.
- ``closeness``: ``max(0, 1 - |v - t| / t)`` if valid, else 0.0.

Default rewards: ``correct`` 1.0, ``format`` 0.1, ``closeness`` 0.2.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from polo.tasks.base import Example, Task
from polo.tasks.expression import ExpressionError, evaluate
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, RewardSpec


def value_of(completion: str, numbers: Sequence[int]) -> int | None:
    """The value of a valid completion (parses, uses each of ``numbers`` at most once), else None."""
    try:
        value, used = evaluate(completion)
    except ExpressionError:
        return None
    return None if Counter(used) - Counter(numbers) else value


def closeness(value: int | None, target: int) -> float:
    return 0.0 if value is None else max(0.0, 1.0 - abs(value - target) / max(abs(target), 1))


def draw_countdown(rng: random.Random, count: int, max_value: int) -> Example:
    """One countdown problem (module docstring): ``count`` numbers in ``1..max_value`` and the positive value
    of a random left-to-right ``+ - *`` expression over all of them, kept as column ``solution``."""
    while True:
        numbers = [rng.randint(1, max_value) for _ in range(count)]
        text, value, low_precedence = str(numbers[0]), numbers[0], False
        for x in numbers[1:]:
            op = rng.choice("+-*")
            if op == "*":
                text = f"({text})*{x}" if low_precedence else f"{text}*{x}"
                value *= x
            else:
                text = f"{text}{op}{x}"
                value = value + x if op == "+" else value - x
            low_precedence = op != "*"
        if value > 0:
            break
    prompt = " ".join(map(str, sorted(numbers))) + f">{value}:"
    return Example(prompt, str(value), {"numbers": tuple(sorted(numbers)), "solution": text})


@register_task("countdown")
class Countdown(Task):
    """Countdown numbers game; difficulty knobs ``count`` and ``max_value``."""

    default_rewards: ClassVar[list[RewardSpec]] = [
        RewardSpec("correct", 1.0),
        RewardSpec("format", 0.1),
        RewardSpec("closeness", 0.2),
    ]

    count: int = Field(3, ge=2, le=8)
    max_value: int = Field(9, ge=1, le=999)

    @property
    def max_completion_chars(self) -> int:
        # numbers, count-1 operators and at most one pair of parentheses per operator
        return self.count * len(str(self.max_value)) + 3 * (self.count - 1)

    def sample(self, rng: random.Random) -> Example:
        return draw_countdown(rng, self.count, self.max_value)

    def demonstration(self, example: Example) -> str:
        return example.columns["solution"]

    def is_correct(self, completion: str, example: Example) -> bool:
        return value_of(completion, example.columns["numbers"]) == int(example.answer)

    def format_reward(
        self, prompts: list[str], completions: list[str], numbers: list, **kwargs
    ) -> list[float]:
        """Reward ``format``: 1.0 if the completion parses and uses only the given numbers."""
        return [float(value_of(c, nums) is not None) for c, nums in zip(completions, numbers)]

    def closeness_reward(
        self, prompts: list[str], completions: list[str], answer: list[str], numbers: list, **kwargs
    ) -> list[float]:
        """Reward ``closeness``: ``max(0, 1 - |value - target| / target)`` for valid completions."""
        return [closeness(value_of(c, nums), int(a)) for c, a, nums in zip(completions, answer, numbers)]

    def task_rewards(self) -> dict[str, RewardFn]:
        return {**super().task_rewards(), "format": self.format_reward, "closeness": self.closeness_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "format": 1.0, "closeness": 1.0}
