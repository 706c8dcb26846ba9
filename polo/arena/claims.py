"""Verdicts of an arena's claims: each test compares the treatment entry with the baseline entry seed by seed.

For a test on metric ``M`` (polo.arena.claim_metrics), seed ``s`` gives the difference
``d_s = σ · (M(treatment, s) − M(baseline, s))`` with ``σ = +1`` when higher is better and ``σ = −1`` when
lower is better, so ``d > 0`` always means the treatment did better. Over the seeds where both entries have
a finished run with a value (at least 2), the paired percentile bootstrap (polo.arena.stats) gives the
``CONFIDENCE`` interval ``[low, high]`` of the mean of ``d``. With the threshold ``t = margin`` for
superiority (the treatment is better by more than the margin) and ``t = −margin`` for non-inferiority (it is
worse by less than the margin), the test is

- held when ``low > t`` (the whole interval is above the threshold),
- not held when ``high ≤ t`` (the whole interval is at or below it),
- inconclusive otherwise, and whenever fewer than 2 seeds pair up.

Each test also carries its power (polo.arena.power): the minimum detectable effect at the seeds run and the seeds
that would decide the observed distance of ``d`` from ``t``.

A claim is held when every test is held, not held when any test is not held, and inconclusive otherwise.
With 2 or 3 seeds the 95 % interval is exactly [smallest, largest] per-seed difference (a resample that
repeats one seed throughout has probability 1/4 or 1/27, above 2.5 %): a test then holds when ``d_s > t`` on
every seed and fails when ``d_s ≤ t`` on every seed.
"""
from __future__ import annotations

from dataclasses import dataclass

from polo.arena.claim_metrics import Caps, run_metric
from polo.arena.power import mde, seeds_to_decide, t_interval
from polo.arena.spec import Claim, ClaimTest
from polo.arena.stats import CONFIDENCE, Interval, bootstrap_diff_test
from polo.arena.summary import EntrySummary

HELD, NOT_HELD, INCONCLUSIVE = "held", "not held", "inconclusive"
MIN_SEEDS = 2


def threshold(test: ClaimTest) -> float:
    """``margin`` for superiority, ``−margin`` for non-inferiority: the test asks ``d > threshold``."""
    return test.margin if test.kind == "superiority" else -test.margin


def direction_sign(test: ClaimTest) -> float:
    """σ = +1 when higher is better, −1 when lower is better: ``d = σ · (treatment − baseline)``."""
    return 1.0 if test.direction == "higher" else -1.0


def verdict_of(diff: Interval, t: float) -> str:
    """Held when the interval of ``d`` lies above ``t``, not held when it lies at or below it."""
    if diff.low > t:
        return HELD
    return NOT_HELD if diff.high <= t else INCONCLUSIVE


@dataclass
class ClaimTestResult:
    test: ClaimTest
    treatment: dict[int, float | None]
    """The treatment's value per seed with a finished run (None: the run cannot give this metric)."""
    baseline: dict[int, float | None]
    seeds: list[int]
    """The seeds that pair up: both entries have a value."""
    diff: Interval | None
    """Mean and interval of ``d`` over ``seeds`` (None with fewer than 2)."""
    verdict: str
    reason: str
    """Why a seed was left out or why the test is inconclusive without an interval; empty otherwise."""

    def mean(self, side: dict[int, float | None]) -> float | None:
        """Mean of ``side`` (``treatment`` or ``baseline``) over the paired seeds."""
        return sum(side[s] for s in self.seeds) / len(self.seeds) if self.seeds else None

    def differences(self) -> list[float]:
        """``d_s`` per paired seed, signed so that ``d > 0`` means the treatment did better."""
        sign = direction_sign(self.test)
        return [sign * (self.treatment[s] - self.baseline[s]) for s in self.seeds]

    @property
    def mde(self) -> float | None:
        """The smallest true mean of ``d`` the paired seeds could detect (polo.arena.power)."""
        return mde(self.differences())

    @property
    def t_interval(self) -> tuple[float, float] | None:
        """The paired t interval of the mean of ``d`` (polo.arena.power), beside the bootstrap's."""
        return t_interval(self.differences())

    @property
    def seeds_to_decide(self) -> int | None:
        """Seeds at which the observed distance of ``d`` from the threshold would be detected (polo.arena.power);
        None when that distance is 0, more than MAX_SEEDS are needed, or fewer than 2 seeds pair up."""
        return seeds_to_decide(self.differences(), threshold(self.test))


def judge_test(test: ClaimTest, treatment: dict[int, float | None], baseline: dict[int, float | None],
               labels: tuple[str, str], confidence: float = CONFIDENCE) -> ClaimTestResult:
    """The verdict of one test from the per-seed values of the treatment and the baseline entry (``labels``)."""
    seeds = sorted(s for s in treatment.keys() & baseline.keys()
                   if treatment[s] is not None and baseline[s] is not None)
    lacking = [f"{label}_s{s}" for label, side in zip(labels, (treatment, baseline))
               for s in sorted(side) if side[s] is None]
    unpaired = [f"{label}_s{s}" for label, side, other in zip(labels, (treatment, baseline), (baseline, treatment))
                for s in sorted(side.keys() - other.keys())]
    notes = ([f"no {test.metric} in {', '.join(lacking)}"] if lacking else []) + \
            ([f"no finished run to pair with {', '.join(unpaired)}"] if unpaired else [])
    if len(seeds) < MIN_SEEDS:
        notes.append(f"{len(seeds)} paired seed(s), at least {MIN_SEEDS} needed")
        return ClaimTestResult(test, treatment, baseline, seeds, None, INCONCLUSIVE, "; ".join(notes))
    sign = direction_sign(test)
    diff = bootstrap_diff_test([sign * treatment[s] for s in seeds], [sign * baseline[s] for s in seeds],
                               paired=True, confidence=confidence).diff
    return ClaimTestResult(test, treatment, baseline, seeds, diff, verdict_of(diff, threshold(test)), "; ".join(notes))


@dataclass
class ClaimResult:
    claim: Claim
    tests: list[ClaimTestResult]

    @property
    def verdict(self) -> str:
        verdicts = [t.verdict for t in self.tests]
        if NOT_HELD in verdicts:
            return NOT_HELD
        return HELD if all(v == HELD for v in verdicts) else INCONCLUSIVE


def evaluate_claims(claims: list[Claim], entries: list[EntrySummary], target: float,
                    confidence: float = CONFIDENCE) -> list[ClaimResult]:
    """Every claim's verdict from the entries' finished runs (``target``: the arena's target accuracy)."""
    runs = {e.label: e.runs for e in entries}
    caps = Caps.of([r for e in entries for r in e.runs])

    def values(label: str, metric: str) -> dict[int, float | None]:
        return {r.seed: run_metric(r, metric, target, caps) for r in runs.get(label, [])}

    return [ClaimResult(c, [judge_test(t, values(c.treatment, t.metric), values(c.baseline, t.metric),
                                       (c.treatment, c.baseline), confidence) for t in c.tests])
            for c in claims]
