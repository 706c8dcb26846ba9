"""Character spans of a decoded response as token columns: the map every text-span input (DiDPO's sub-diffs,
the span and element inputs) uses to turn ``[c0, c1)`` in the text into ``[start, end)`` in the tokens."""
from __future__ import annotations

import bisect


def char_ends(tokenizer, ids: list[int]) -> tuple[str, list[int]]:
    """The decoded text of ``ids`` and, per token, the end of its characters in that text."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    if "".join(pieces) != text:  # tokens whose text depends on their neighbours (byte pieces, word boundaries)
        pieces = [tokenizer.decode(ids[: k + 1], skip_special_tokens=True) for k in range(len(ids))]
        return text, [len(p) for p in pieces]
    ends, total = [], 0
    for piece in pieces:
        total += len(piece)
        ends.append(total)
    return text, ends


def token_columns(ends: list[int], c0: int, c1: int) -> tuple[int, int]:
    """Columns ``[start, end)`` of the tokens whose characters meet ``[c0, c1)`` (``ends`` from ``char_ends``)."""
    start = bisect.bisect_right(ends, c0)
    end = min(len(ends), bisect.bisect_left(ends, c1) + 1) if c1 > c0 else start
    return start, max(start, end)
