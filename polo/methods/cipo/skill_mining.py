"""Skill mining for tool-granularity agents (CIPO): frequent contiguous tool-name n-grams of successful
episodes become composite skills. Pure Python; the engine calls it on the action sequences it holds."""
from __future__ import annotations

from collections import Counter
from typing import Sequence


def skill_candidates(sequences: Sequence[Sequence[str]], n_max: int = 3) -> list[tuple[tuple[str, ...], int, int]]:
    """Every candidate skill of tool-name sequences (one per successful episode, in call order), ranked, as
    ``(n-gram, count, score)``.

    Candidates are the contiguous n-grams with ``2 ≤ n ≤ n_max``; ``count`` is the number of occurrences over
    all sequences, each position counted (overlapping occurrences too, and repeats inside one sequence). The
    score ``count·(n − 1)`` is the number of atomic calls the skill would have saved. Ranking: score (higher
    first), then length (longer first), then the tool names in lexicographic order, so the result is
    deterministic. Counting walks the sequences' positions: string work, a plain loop.
    """
    if n_max < 2:
        raise ValueError(f"mine_skills: n_max must be ≥ 2 (a skill chains at least two tools), got {n_max}")
    counts: Counter[tuple[str, ...]] = Counter()
    for seq in sequences:
        if isinstance(seq, str):
            raise ValueError("mine_skills: each sequence must be a list of tool names, not one string")
        names = tuple(seq)
        for n in range(2, n_max + 1):
            for start in range(len(names) - n + 1):
                counts[names[start:start + n]] += 1
    scored = [(gram, c, c * (len(gram) - 1)) for gram, c in counts.items()]
    scored.sort(key=lambda row: (-row[2], -len(row[0]), row[0]))
    return scored


def mine_skills(sequences: Sequence[Sequence[str]], n_max: int = 3, k: int = 8) -> list[tuple[str, ...]]:
    """The ``k`` best-ranked skills of ``skill_candidates(sequences, n_max)`` (fewer when there are fewer
    candidates); a skill runs its tools in order."""
    if k < 0:
        raise ValueError(f"mine_skills: k must be ≥ 0, got {k}")
    return [gram for gram, _, _ in skill_candidates(sequences, n_max)[:k]]
