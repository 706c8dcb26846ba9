"""``addition``: ``"37+48="`` → ``"85"``; operands uniform in ``0 .. 10**digits - 1``.

Rewards by default: ``correct`` (1.0 iff the stripped completion equals the sum) with weight 1.0 and
``digit_match`` (partial credit per digit, aligned from the least significant digit, 1.0 iff correct;
see ``polo.tasks.rewards``) with weight 0.5. The split is by hash of the prompt, i.e. of ``(a, b)``.
"""
from __future__ import annotations

import random
from typing import ClassVar

from pydantic import Field

from polo.tasks.base import Example, Task
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardSpec


@register_task("addition")
class Addition(Task):
    """Multi-digit addition; difficulty knob ``digits``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("correct", 1.0), RewardSpec("digit_match", 0.5)]

    digits: int = Field(2, ge=1, le=18)

    @property
    def max_completion_chars(self) -> int:
        return self.digits + 1

    def sample(self, rng: random.Random) -> Example:
        a, b = rng.randrange(10**self.digits), rng.randrange(10**self.digits)
        return Example(f"{a}+{b}=", str(a + b))
