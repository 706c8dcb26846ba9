"""``slate_rank``: pick the relevant candidates of a pool (the slate), then rank the best of them (F-GRPO).

Prompt ``"a3b7c1d9e4f8g2h5>5:"``: ``pool`` candidates, each a letter id and a visible digit, then a threshold
t. Hidden rule: a candidate is relevant when its digit is greater than t (1 to pool−1 relevant by
construction). Answer ``S:<slate>|R:<rank>``: the slate lists candidate ids, the rank at most ``rank_k`` of
the slate's ids in order. Demonstration: the relevant ids in pool order, then the relevant ids by digit
(highest first, ties by id), cut at ``rank_k`` (``"S:bdfh|R:dfb"``).

Rewards (Rel = the relevant ids):

- ``slate``: ``Recall(slate, Rel) = |slate ∩ Rel| / |Rel|`` (``slate_metric: f1``: the F1 of slate and Rel),
- ``rank``: ``NDCG@k = Σ_{p≤k} rel_p / log2(p+1) ÷ Σ_{p≤min(k,|Rel|)} 1/log2(p+1)``, k = ``rank_k``, binary
  ``rel_p``,
- both ``−format_penalty`` for a malformed answer: not ``S:[ids]|R:[ids]``, an id twice in the slate or in
  the rank, an id not in the pool, a rank id not in the slate, or a rank longer than ``rank_k``,
- ``correct``: well formed, slate = Rel and NDCG@k = 1.

Phases (``tagged_spans``, tags ``slate`` and ``rank``): the characters before the first ``|`` are the slate
phase (the opener ``S:`` included), the rest the rank phase (its opener ``|R:`` included); with no ``|`` the
whole text is the slate phase. Default rewards: ``slate`` 1.0, ``rank`` 1.0 (the joint reward
``R_slate + λ·R_rank`` with λ = 1).
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field

from polo.tasks.base import Example, Task
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, RewardSpec
from polo.tasks.spans import TaggedSpans

IDS = "abcdefghij"
ANSWER = re.compile(r"S:([a-j]*)\|R:([a-j]*)")


def recall(slate: Sequence[str], relevant: set[str]) -> float:
    """``|slate ∩ Rel| / |Rel|`` (1 when nothing is relevant)."""
    return len(set(slate) & relevant) / len(relevant) if relevant else 1.0


def f1(slate: Sequence[str], relevant: set[str]) -> float:
    """Harmonic mean of the slate's precision and recall against Rel (0 when they share nothing)."""
    hit = len(set(slate) & relevant)
    return 2 * hit / (len(set(slate)) + len(relevant)) if hit else 0.0


def ndcg(rank: Sequence[str], relevant: set[str], k: int) -> float:
    """``NDCG@k`` with binary relevance: ``Σ_{p≤k} rel_p/log2(p+1) ÷ Σ_{p≤min(k,|Rel|)} 1/log2(p+1)``."""
    ideal = sum(1 / math.log2(p + 1) for p in range(1, min(k, len(relevant)) + 1))
    gain = sum(1 / math.log2(p + 1) for p, item in enumerate(rank[:k], 1) if item in relevant)
    return gain / ideal if ideal else 0.0


@register_task("slate_rank")
class SlateRank(Task):
    """Slate generation then ranking from a candidate pool; knobs ``pool``, ``rank_k``, ``slate_metric``,
    ``format_penalty``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("slate", 1.0), RewardSpec("rank", 1.0)]
    span_tags: ClassVar[tuple[str, ...]] = ("slate", "rank")

    pool: int = Field(8, ge=2, le=10)
    """Candidates in the prompt (ids ``a`` onwards)."""
    rank_k: int = Field(3, ge=1, le=5)
    """Longest rank and the k of NDCG@k."""
    slate_metric: Literal["recall", "f1"] = "recall"
    """Score of the slate phase."""
    format_penalty: float = Field(0.5, ge=0)
    """Both phase rewards are −format_penalty for a malformed answer."""

    @property
    def max_completion_chars(self) -> int:
        return len("S:|R:") + self.pool + self.rank_k

    def sample(self, rng: random.Random) -> Example:
        while True:
            digits = [rng.randint(0, 9) for _ in range(self.pool)]
            t = rng.randint(0, 8)
            relevant = [IDS[i] for i, d in enumerate(digits) if d > t]
            if 0 < len(relevant) < self.pool:
                break
        prompt = "".join(f"{IDS[i]}{d}" for i, d in enumerate(digits)) + f">{t}:"
        best = sorted(relevant, key=lambda c: (-digits[IDS.index(c)], c))[: self.rank_k]
        answer = f"S:{''.join(relevant)}|R:{''.join(best)}"
        return Example(prompt, answer, {"relevant": "".join(relevant)})

    def parse(self, completion: str) -> tuple[str, str] | None:
        """``(slate, rank)`` of a well-formed answer (module docstring), else None."""
        m = ANSWER.fullmatch(completion.strip())
        if m is None:
            return None
        slate, rank = m.groups()
        ids = IDS[: self.pool]
        if (len(set(slate)) < len(slate) or len(set(rank)) < len(rank) or len(rank) > self.rank_k
                or not set(slate) <= set(ids) or not set(rank) <= set(slate)):
            return None
        return slate, rank

    def phase_scores(self, completion: str, relevant: str) -> tuple[float, float]:
        """``(R_slate, R_rank)`` of ``completion`` (both −format_penalty when malformed)."""
        parsed = self.parse(completion)
        if parsed is None:
            return -self.format_penalty, -self.format_penalty
        slate, rank = parsed
        rel = set(relevant)
        return (recall if self.slate_metric == "recall" else f1)(slate, rel), ndcg(rank, rel, self.rank_k)

    def tagged_spans(self, completion: str, example: Example) -> TaggedSpans:
        """The slate and rank phases of ``completion`` (module docstring) and their rewards."""
        cut = completion.find("|")
        cut = len(completion) if cut < 0 else cut
        spans = [(0, 0, cut)] + ([(1, cut, len(completion))] if cut < len(completion) else [])
        return TaggedSpans(spans, list(self.phase_scores(completion, example.columns["relevant"])))

    def is_correct(self, completion: str, example: Example) -> bool:
        parsed = self.parse(completion)
        rel = example.columns["relevant"]
        return parsed is not None and set(parsed[0]) == set(rel) and ndcg(parsed[1], set(rel), self.rank_k) == 1.0

    def slate_reward(self, prompts, completions, relevant, **kwargs) -> list[float]:
        """Reward ``slate``: recall (or F1) of the slate, −format_penalty when malformed."""
        return [self.phase_scores(c, r)[0] for c, r in zip(completions, relevant)]

    def rank_reward(self, prompts, completions, relevant, **kwargs) -> list[float]:
        """Reward ``rank``: NDCG@rank_k of the rank, −format_penalty when malformed."""
        return [self.phase_scores(c, r)[1] for c, r in zip(completions, relevant)]

    def task_rewards(self) -> dict[str, RewardFn]:
        return {**super().task_rewards(), "slate": self.slate_reward, "rank": self.rank_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "slate": 1.0, "rank": 1.0}
