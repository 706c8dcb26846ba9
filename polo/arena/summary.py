"""Numbers of an arena: per run (final accuracy, time to target, diagnostics) and per entry over seeds,
and the ranking of entries by final accuracy with a bootstrap test between them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Any

from polo.arena.stats import DiffTest, Interval, bootstrap_ci, bootstrap_diff_test, tiers

ACCURACY = "eval/greedy_accuracy"
REWARD = "reward/total"
DIAGNOSTICS = {
    "tokens_per_s": ("perf/tokens_per_s",),
    "response_length": ("response/length",),
    "entropy": ("policy/entropy",),
    "kl": ("policy/kl_old",),
    "clip_frac": ("policy/clip_frac_low", "policy/clip_frac_high"),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
}
"""Per-step means reported for each run; a tuple of keys is summed per step (clip fraction = low + high)."""


@dataclass
class RunResult:
    label: str
    seed: int
    rows: list[dict[str, Any]]
    metric: str = ACCURACY
    """The evaluation metric the arena ranks by (higher is better): held-out greedy accuracy, or a control
    method's headline (``eval/return``, ...)."""

    def evals(self) -> list[tuple[int, float, float]]:
        """(step, elapsed seconds, value of ``metric``) of every evaluation."""
        key = self.metric
        return [(r["step"], r.get("elapsed_s") or 0.0, r[key]) for r in self.rows if r.get(key) is not None]

    @property
    def final_accuracy(self) -> float:
        return self.evals()[-1][2]

    @property
    def warm_accuracy(self) -> float | None:
        """Accuracy of the step-0 evaluation (the warm start, before any update); None without one."""
        return next((acc for step, _, acc in self.evals() if step == 0), None)

    @property
    def steps(self) -> int:
        return self.rows[-1]["step"]

    @property
    def wall_s(self) -> float:
        return self.rows[-1].get("elapsed_s") or 0.0

    def reaching(self, target: float) -> tuple[int, float] | None:
        """(step, training seconds) of the first evaluation at or above ``target``; None if never."""
        return next(((step, t) for step, t, acc in self.evals() if acc >= target), None)

    def time_to(self, target: float) -> float | None:
        """Training seconds until the first evaluation at or above ``target``; None if never."""
        first = self.reaching(target)
        return None if first is None else first[1]

    def diagnostic(self, keys: tuple[str, ...]) -> float | None:
        values = [sum(r[k] for k in keys) for r in self.rows if all(r.get(k) is not None for k in keys)]
        return sum(values) / len(values) if values else None


@dataclass
class EntrySummary:
    label: str
    runs: list[RunResult]
    final_accuracy: Interval
    time_to_target: float | None
    """Median over seeds of the seconds to reach the target (a run that never does counts as infinite);
    None when the median is not reached."""
    reached: int
    diagnostics: dict[str, float | None]

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.runs]

    def accuracy_by_seed(self) -> dict[int, float]:
        return {r.seed: r.final_accuracy for r in self.runs}


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def summarize_entry(label: str, runs: list[RunResult], target: float) -> EntrySummary:
    times = [r.time_to(target) for r in runs]
    mid = median([math.inf if t is None else t for t in times]) if runs else math.inf
    return EntrySummary(
        label=label,
        runs=runs,
        final_accuracy=bootstrap_ci([r.final_accuracy for r in runs]),
        time_to_target=None if math.isinf(mid) else mid,
        reached=sum(t is not None for t in times),
        diagnostics={name: _mean([r.diagnostic(keys) for r in runs]) for name, keys in DIAGNOSTICS.items()},
    )


def compare(a: EntrySummary, b: EntrySummary) -> DiffTest | None:
    """Bootstrap test of final accuracy ``a − b``: paired over the seeds both have (if at least 2),
    else unpaired; None when either has fewer than 2 runs."""
    if len(a.runs) < 2 or len(b.runs) < 2:
        return None
    xa, xb = a.accuracy_by_seed(), b.accuracy_by_seed()
    common = sorted(xa.keys() & xb.keys())
    if len(common) >= 2:
        return bootstrap_diff_test([xa[s] for s in common], [xb[s] for s in common], paired=True)
    return bootstrap_diff_test(list(xa.values()), list(xb.values()), paired=False)


@dataclass
class Ranked:
    entry: EntrySummary
    rank: int
    tier: int
    vs_best: DiffTest | None
    """Test of this entry against the best entry (None for the best itself)."""


def rank_entries(entries: list[EntrySummary]) -> list[Ranked]:
    """Entries by mean final accuracy, best first, grouped into tiers the bootstrap test cannot split."""
    by_label = {e.label: e for e in entries if e.runs}

    def distinguishable(x: str, y: str) -> bool:
        test = compare(by_label[x], by_label[y])
        return test is not None and test.distinguishable

    tier = tiers({k: e.final_accuracy.mean for k, e in by_label.items()}, distinguishable)
    order = sorted(tier, key=lambda k: (-by_label[k].final_accuracy.mean, k))
    best = by_label[order[0]] if order else None
    return [Ranked(by_label[k], i + 1, tier[k], None if i == 0 else compare(by_label[k], best))
            for i, k in enumerate(order)]
