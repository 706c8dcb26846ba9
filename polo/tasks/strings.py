"""String transformations of random lowercase words: ``reverse`` (``"abc>"`` → ``"cba"``) and
``sort`` (``"cab="`` → ``"abc"``); difficulty knob ``length`` (letters a-z, exactly ``length``).

Rewards by default: ``correct`` (1.0 iff the stripped completion equals the answer) with weight 1.0 and
``char_match`` (fraction of positions matching, aligned from the left, over the longer string; 1.0 iff
correct; see ``polo.tasks.rewards``) with weight 0.5.
"""
from __future__ import annotations

import random
import string
from typing import ClassVar

from pydantic import Field

from polo.tasks.base import Example, Task
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardSpec


class StringTask(Task):
    """A word of ``length`` random letters followed by ``separator``; the answer is ``transform(word)``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("correct", 1.0), RewardSpec("char_match", 0.5)]
    separator: ClassVar[str] = ">"

    length: int = Field(5, ge=1, le=64)

    @staticmethod
    def transform(word: str) -> str:
        raise NotImplementedError

    @property
    def max_completion_chars(self) -> int:
        return self.length

    def sample(self, rng: random.Random) -> Example:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(self.length))
        return Example(word + self.separator, self.transform(word))


@register_task("reverse")
class Reverse(StringTask):
    """Reverse the letters."""

    separator: ClassVar[str] = ">"

    @staticmethod
    def transform(word: str) -> str:
        return word[::-1]


@register_task("sort")
class Sort(StringTask):
    """Sort the letters alphabetically."""

    separator: ClassVar[str] = "="

    @staticmethod
    def transform(word: str) -> str:
        return "".join(sorted(word))
