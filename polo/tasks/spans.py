"""What a task reports about the structure of a completion, for the span and element input providers.

``TaggedSpans`` (a task's ``tagged_spans(completion, example)``): the completion cut into tagged phases, each
with its own score (F-GRPO's slate and rank). ``ElementReport`` (a task's ``element_report(completion,
example)``): each reference element's quality and the generated block aligned to it (P2TPO). Positions are
character offsets into the completion text.
"""
from __future__ import annotations

from typing import NamedTuple


class TaggedSpans(NamedTuple):
    spans: list[tuple[int, int, int]]
    """``(tag, start, end)``: the characters ``[start, end)`` belong to tag ``tag`` (0..S−1, the task's
    ``span_tags``); characters in no span belong to no tag."""
    scores: list[float]
    """One score per tag (S values): the reward of that phase of the completion."""


class ElementReport(NamedTuple):
    quality: list[float]
    """Per reference element (E values): quality in [0, 1], 0 when the element is missing."""
    blocks: list[tuple[int, int] | None]
    """Per element: the characters ``[start, end)`` of the generated block aligned to it, None when missing."""
    errors: list[int]
    """Characters labelled ``error`` inside the aligned blocks (every other block character is ``correct``)."""
    boundary: list[int | None]
    """Per missing element: the character where it should have started (the completion's length: at its end,
    i.e. the EOS token); None for an aligned element."""
