"""Diversity of a set of generations: the n-gram statistics GRUE reports (GEM's NGramStats and MSTTR).

"Is Reinforcement Learning (Not) for Natural Language Processing: Benchmarks, Baselines, and Building Blocks
for Natural Language Policy Optimization" (RL4LMs / GRUE, arXiv:2210.01241) scores every policy on task
reward, naturalness and diversity; the diversity metrics are those of the GEM benchmark. All of them read the
lower-cased whitespace tokens of every generation; n-grams never cross a generation's boundary.

With ``C_n`` the counts of the n-grams of all generations (a multiset):

- ``distinct-n = |C_n| / Σ C_n``: distinct n-grams over all n-grams (0 when there is no n-gram at all);
- ``vocab_size-n = |C_n|``: the number of distinct n-grams;
- ``unique-n = #{g : C_n(g) = 1}``: n-grams that occur exactly once;
- ``mean_length``: tokens per generation, averaged over generations (an empty generation counts 0);
- ``msttr-W``: the mean segmental type-token ratio: all tokens concatenated in order, cut into consecutive
  windows of W tokens (a last, shorter window is dropped), each window's ``distinct tokens / W``, averaged;
  NaN when there are fewer than W tokens (no full window).

Example: "the movie was great" and "the movie was bad": 8 unigrams of which 5 distinct (distinct-1 0.625,
vocab_size-1 5) and 2 seen once ("great", "bad": unique-1 2); 6 bigrams, 4 distinct (distinct-2 0.6667).
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

Unit = Literal["words", "chars"]
UNITS: tuple[Unit, ...] = ("words", "chars")


def tokens(text: str, unit: Unit = "words") -> list[str]:
    """The lower-cased whitespace tokens of ``text`` (``words``), or its non-whitespace characters (``chars``)."""
    words = text.lower().split()
    return words if unit == "words" else [char for word in words for char in word]


def ngram_counts(tokenized: Sequence[Sequence[str]], n: int) -> Counter:
    """Counts of the n-grams (tuples) of every token list, none crossing from one list into the next."""
    return Counter(tuple(seq[i : i + n]) for seq in tokenized for i in range(len(seq) - n + 1))


def msttr(flat: Sequence[str], window: int) -> float:
    """Mean type-token ratio over the consecutive full windows of ``window`` tokens; NaN without one."""
    full = len(flat) // window
    if full == 0:
        return math.nan
    return sum(len(set(flat[k * window : (k + 1) * window])) for k in range(full)) / (full * window)


def metric_names(orders: Sequence[int] = (1, 2), window: int = 100) -> list[str]:
    """The keys of ``diversity(generations, orders, window)``, in its order."""
    per_order = [f"{stat}-{n}" for n in orders for stat in ("distinct", "vocab_size", "unique")]
    return [*per_order, "mean_length", f"msttr-{window}"]


def diversity(generations: Sequence[str], orders: Sequence[int] = (1, 2), window: int = 100,
              unit: Unit = "words") -> dict[str, float]:
    """``distinct-n``, ``vocab_size-n``, ``unique-n`` for each n of ``orders``, ``mean_length`` and
    ``msttr-<window>`` of ``generations``, counted in ``unit`` tokens (see the module docstring)."""
    if isinstance(generations, str):
        raise TypeError("diversity: expected a list of generations, got one string")
    if not generations:
        raise ValueError("diversity: no generations to measure (expected at least one text)")
    bad = [n for n in orders if not isinstance(n, int) or n < 1]
    if bad or window < 1:
        raise ValueError(f"diversity: n-gram orders must be integers >= 1 and the window >= 1, got orders "
                         f"{list(orders)} and window {window}")
    if unit not in UNITS:
        raise ValueError(f"diversity: unit must be one of {list(UNITS)}, got {unit!r}")
    tokenized = [tokens(text, unit) for text in generations]
    stats: dict[str, float] = {}
    for n in orders:
        counts = ngram_counts(tokenized, n)
        total = sum(counts.values())
        stats[f"distinct-{n}"] = len(counts) / total if total else 0.0
        stats[f"vocab_size-{n}"] = float(len(counts))
        stats[f"unique-{n}"] = float(sum(1 for c in counts.values() if c == 1))
    stats["mean_length"] = sum(map(len, tokenized)) / len(tokenized)
    stats[f"msttr-{window}"] = msttr([t for seq in tokenized for t in seq], window)
    return stats
