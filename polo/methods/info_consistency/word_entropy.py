"""The ``word_entropy`` input: the Shannon entropy of each completion's word distribution (host-side text math)."""
from __future__ import annotations

import math
from collections import Counter

import torch
from torch import Tensor

from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider


def word_entropy(text: str) -> float:
    """``H = −Σ_v p(v) ln p(v)`` over the empirical distribution ``p`` of the lower-cased whitespace-separated words
    of ``text`` (natural log); 0 for a text of no word or of one distinct word."""
    counts = Counter(text.lower().split())
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values()) if n else 0.0


@register_provider("word_entropy")
def completion_word_entropy(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``word_entropy`` ``[B]``: ``word_entropy`` of each row's completion text."""
    return {"word_entropy": torch.tensor([word_entropy(c) for c in rollouts.completions], dtype=torch.float32)}
