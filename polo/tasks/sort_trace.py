"""``sort_trace``: sort a random word by selection sort, one line per selection, then the sorted word.

The prompt is ``sort``'s (``"dbca="``); step ``i`` writes the smallest letter still left and, after a space,
the letters left once that letter's first occurrence is taken out (in their order in the word)::

    a dbc
    b dc
    c d
    d
    #### abcd

The letters before the spaces, read down, are the answer. A word of ``n = length`` letters gives a
demonstration of exactly ``n(n-1)/2 + 4n + 4`` characters (``n`` lines of ``2 + (n-1-i)`` characters less
the last line's space, ``n - 1`` newlines, ``"\\n#### "`` and the answer), 64 at ``length`` 8, 188 at 16.
Rewards: TracedTask's (``correct``: the answer equals the sorted word; ``format``).
"""
from __future__ import annotations

import random
import string

from pydantic import Field

from polo.tasks.base import Example
from polo.tasks.registry import register_task
from polo.tasks.traced import TracedTask


def selection_lines(word: str) -> list[str]:
    """``"<smallest letter left> <letters left after taking it>"`` for each selection (module docstring)."""
    lines, left = [], word
    while left:
        smallest = min(left)
        at = left.index(smallest)
        left = left[:at] + left[at + 1:]
        lines.append(f"{smallest} {left}".rstrip())
    return lines


@register_task("sort_trace")
class SortTrace(TracedTask):
    """Sort ``length`` random lowercase letters, writing each selection-sort step."""

    length: int = Field(8, ge=1, le=40)
    """Letters in the word."""

    @property
    def max_completion_chars(self) -> int:
        n = self.length
        return n * (n - 1) // 2 + 4 * n + 4

    def sample(self, rng: random.Random) -> Example:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(self.length))
        return Example(word + "=", "".join(sorted(word)))

    def trace(self, example: Example) -> str:
        return "\n".join(selection_lines(example.prompt[: -1]))
