"""Statistics over seeds: bootstrap confidence intervals, a bootstrap test of a difference of means, a
ranking that groups entries which the test cannot tell apart, and Pearson / Spearman correlations.

Everything resamples with a fixed-seed generator, so a report is reproducible to the last digit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float


def _percentiles(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_means(values: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """Means of ``resamples`` resamples (with replacement, same size) of ``values``."""
    x = np.asarray(values, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(x), size=(resamples, len(x)))
    return x[idx].mean(axis=1)


def bootstrap_ci(values: Sequence[float], confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                 seed: int = SEED) -> Interval:
    """Mean and percentile-bootstrap ``confidence`` interval of the mean (degenerate for one value)."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return Interval(math.nan, math.nan, math.nan)
    if len(x) == 1:
        return Interval(float(x[0]), float(x[0]), float(x[0]))
    return Interval(float(x.mean()), *_percentiles(bootstrap_means(x, resamples, seed), confidence))


@dataclass(frozen=True)
class DiffTest:
    """Bootstrap test of ``mean(a) − mean(b)``: interval of the difference and two-sided p-value."""

    diff: Interval
    p_value: float
    paired: bool

    @property
    def distinguishable(self) -> bool:
        """The ``confidence`` interval of the difference excludes 0."""
        return self.diff.low > 0 or self.diff.high < 0


def bootstrap_diff_test(a: Sequence[float], b: Sequence[float], paired: bool, confidence: float = CONFIDENCE,
                        resamples: int = RESAMPLES, seed: int = SEED) -> DiffTest:
    """Percentile-bootstrap test of the difference of means at level ``1 − confidence``.

    Paired (``a[i]`` and ``b[i]`` share seed ``i``): resample the per-seed differences ``a[i] − b[i]``.
    Unpaired: resample ``a`` and ``b`` independently. The p-value is
    ``2 · min(P*(d ≤ 0), P*(d ≥ 0))`` over the bootstrap distribution of the difference ``d``, capped at 1.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if paired:
        if len(a) != len(b):
            raise ValueError(f"paired test needs equal lengths, got {len(a)} and {len(b)}")
        samples = bootstrap_means(a - b, resamples, seed)
    else:
        samples = bootstrap_means(a, resamples, seed) - bootstrap_means(b, resamples, seed + 1)
    p = min(1.0, 2 * min(float((samples <= 0).mean()), float((samples >= 0).mean())))
    diff = Interval(float(a.mean() - b.mean()), *_percentiles(samples, confidence))
    return DiffTest(diff, p, paired)


def tiers(means: dict[str, float], distinguishable: Callable[[str, str], bool]) -> dict[str, int]:
    """Rank by mean (best first) and group into tiers: an entry joins the current tier when the test cannot
    tell it from that tier's leader (its best entry), and otherwise leads a new tier. Tiers count from 1."""
    order = sorted(means, key=lambda k: (-means[k], k))
    out: dict[str, int] = {}
    leader, tier = None, 0
    for label in order:
        if leader is None or distinguishable(leader, label):
            leader, tier = label, tier + 1
        out[label] = tier
    return out


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation ``Σ(x−x̄)(y−ȳ) / √(Σ(x−x̄)² · Σ(y−ȳ)²)``; NaN when either side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"correlation needs two equally long sequences of at least 2 values, got {len(x)} and {len(y)}")
    dx, dy = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum()) / denominator if denominator > 0 else math.nan


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1 (smallest) with tied values sharing the mean of the ranks they span."""
    _, inverse, counts = np.unique(np.asarray(values, dtype=float), return_inverse=True, return_counts=True)
    last = np.cumsum(counts)
    return ((last - counts + 1 + last) / 2)[inverse]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation: ``pearson`` of the ``average_ranks`` (ties averaged)."""
    if len(x) != len(y):
        raise ValueError(f"correlation needs two equally long sequences, got {len(x)} and {len(y)}")
    return pearson(average_ranks(x), average_ranks(y))
