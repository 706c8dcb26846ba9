"""``fields``: write a record's fields as ``key=value;…`` in key order, each value reversed (P2TPO's task).

Prompt ``"c:dog a:17 b:xy>"``: ``count`` fields (distinct letter keys from ``a``..``h``, values of 1 to
``length`` lowercase letters or digits) in random order. Answer ``"a=71;b=yx;c=god"``: the fields sorted by
key, each value written backwards. The reference elements are the fields in key order.

Aligner (``element_report``): the completion is cut on ``;`` into blocks; a block ``k=v`` (split at its first
``=``) whose key k is a reference key is aligned to that element, the first such block per key; other blocks
(no ``=``, unknown or repeated key) are aligned to nothing. Element quality ``q = 1 − lev(v, ref) /
max(|v|, |ref|)`` (Levenshtein distance, 1 for two empty values), 0 when no block has its key. Inside an aligned
block the key and ``=`` are correct; the value's characters are labelled by a character diff against the
reference value (``difflib``): characters kept are correct, replaced or inserted ones are errors, and a
reference stretch left out marks the generated character just before the omission point (the ``=`` when it is
at the start) as an error. A missing element's boundary is the start of the first aligned block of a later
key (where it should have been written), else the end of the text (the EOS token).

Rewards: ``quality`` (``U = mean_e q_e``, the page utility), ``correct`` (exactly the answer). Default:
``quality`` 1.0.
"""
from __future__ import annotations

import difflib
import random
from typing import ClassVar

from pydantic import Field

from polo.tasks.base import Example, Task
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, RewardSpec
from polo.tasks.spans import ElementReport

KEYS = "abcdefgh"
VALUE_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character) between ``a`` and ``b``."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def value_quality(value: str, reference: str) -> float:
    """``1 − lev(value, reference) / max(|value|, |reference|)``; 1 for two empty strings."""
    longest = max(len(value), len(reference))
    return 1.0 - levenshtein(value, reference) / longest if longest else 1.0


def value_errors(value: str, reference: str, at: int) -> list[int]:
    """Error characters of ``value`` (written from character ``at``; ``at − 1`` is its ``=``) against
    ``reference``: replaced and inserted characters, and the character before each omission point."""
    errors: list[int] = []
    for op, i0, i1, _, _ in difflib.SequenceMatcher(None, value, reference, autojunk=False).get_opcodes():
        if op in ("replace", "delete"):  # value characters replaced, or that the reference does not have
            errors += range(at + i0, at + i1)
        elif op == "insert":  # reference characters missing from value at i0: the character before is marked
            errors.append(at + i0 - 1)
    return sorted(set(errors))


@register_task("fields")
class Fields(Task):
    """Structured record output with reference elements; knobs ``count`` and ``length``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("quality", 1.0)]

    count: int = Field(3, ge=1, le=len(KEYS))
    """Fields per record (the elements E)."""
    length: int = Field(3, ge=1, le=8)
    """Longest value."""

    @property
    def max_completion_chars(self) -> int:
        return self.count * (self.length + 3) - 1

    def sample(self, rng: random.Random) -> Example:
        keys = rng.sample(KEYS, self.count)
        record = {k: "".join(rng.choices(VALUE_CHARS, k=rng.randint(1, self.length))) for k in keys}
        prompt = " ".join(f"{k}:{v}" for k, v in record.items()) + ">"
        return Example(prompt, ";".join(f"{k}={record[k][::-1]}" for k in sorted(keys)))

    def references(self, example: Example) -> list[tuple[str, str]]:
        """The reference elements ``(key, value)`` in key order."""
        return [tuple(part.split("=", 1)) for part in example.answer.split(";")]

    def element_report(self, completion: str, example: Example) -> ElementReport:
        """Align ``completion``'s blocks to the reference elements and score them (module docstring)."""
        refs = self.references(example)
        index = {k: e for e, (k, _) in enumerate(refs)}
        quality, blocks = [0.0] * len(refs), [None] * len(refs)
        errors: list[int] = []
        start = 0
        for part in completion.split(";"):
            key, eq, value = part.partition("=")
            e = index.get(key)
            if eq and e is not None and blocks[e] is None:
                blocks[e] = (start, start + len(part))
                quality[e] = value_quality(value, refs[e][1])
                errors += value_errors(value, refs[e][1], start + len(key) + 1)
            start += len(part) + 1
        starts = [b[0] if b else None for b in blocks]
        boundary = [None if blocks[e] else next((s for s in starts[e + 1:] if s is not None), len(completion))
                    for e in range(len(refs))]
        return ElementReport(quality, blocks, errors, boundary)

    def quality_reward(self, prompts, completions, answer, **kwargs) -> list[float]:
        """Reward ``quality``: the mean element quality ``U``."""
        out = []
        for c, a in zip(completions, answer):
            q = self.element_report(c, Example("", a)).quality
            out.append(sum(q) / len(q))
        return out

    def task_rewards(self) -> dict[str, RewardFn]:
        return {**super().task_rewards(), "quality": self.quality_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "quality": 1.0}
