"""Power of a claim's paired test over seeds: the smallest effect the seeds run could detect, and how many seeds
would decide the difference observed.

For per-seed differences ``d_1..d_n`` with sample standard deviation ``s``, a paired t-test at two-sided level
``α`` has power ``1 − β`` against a true mean difference ``δ`` (from the test's threshold) when, in the usual
approximation of the noncentral t,

    |δ| ≥ (t_{1−α/2, n−1} + t_{1−β, n−1}) · s / √n.

``mde(d)`` is the right-hand side at the seeds run (α = 5 %, 80 % power); ``seeds_to_decide(d, t)`` is the
smallest ``n ≥ 2`` at which it falls to ``|mean(d) − t|``, the observed distance from the threshold, with ``s``
kept at its observed value. ``t_interval(d)`` is the paired t interval ``mean(d) ± t_{0.975, n−1} · s/√n``. The
verdicts themselves come from the paired bootstrap (polo.arena.claims), whose percentile interval is narrower
than the t interval at few seeds; these numbers say how far a run is from deciding.

Student's t quantiles without scipy: the CDF for integer degrees of freedom ν in closed form (Abramowitz & Stegun
26.7.3–26.7.4, with θ = atan(t/√ν)), inverted by bisection; above ``SERIES_DF`` the Cornish–Fisher expansion
around the normal quantile, accurate to ~1e-6 there.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

ALPHA, POWER = 0.05, 0.8
SERIES_DF = 200
MAX_SEEDS = 100_000
"""seeds_to_decide gives up above this and returns None (as for a difference exactly at the threshold)."""


def t_cdf(x: float, df: int) -> float:
    """P(T ≤ x) for Student's t with integer ``df ≥ 1`` degrees of freedom (A&S 26.7.3 odd, 26.7.4 even)."""
    if df < 1 or int(df) != df:
        raise ValueError(f"t_cdf: df must be a positive integer, got {df!r}")
    theta = math.atan(x / math.sqrt(df))
    c2, term = math.cos(theta) ** 2, 1.0
    if df % 2:  # odd: θ + sinθ cosθ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + ... up to cos^{ν−3}θ)
        total = 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = (theta + math.sin(theta) * math.cos(theta) * total) * 2 / math.pi
    else:  # even: sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ... up to cos^{ν−2}θ)
        total = 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = math.sin(theta) * total
    return 0.5 + 0.5 * a


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom, for ``0.5 ≤ p < 1``."""
    if not 0.5 <= p < 1:
        raise ValueError(f"t_quantile: p must lie in [0.5, 1), got {p!r}")
    z = statistics.NormalDist().inv_cdf(p)
    if df > SERIES_DF:  # Cornish–Fisher: t = z + g1/ν + g2/ν² + g3/ν³
        g1 = (z**3 + z) / 4
        g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
        g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
        return z + g1 / df + g2 / df**2 + g3 / df**3
    low, high = 0.0, max(1.0, 2 * z)
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


def detectable(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """``(t_{1−α/2, n−1} + t_{power, n−1}) · sd / √n``: the smallest true mean difference detected at ``n`` seeds."""
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def t_interval(d: Sequence[float], confidence: float = 1 - ALPHA) -> tuple[float, float] | None:
    """``mean(d) ± t_{(1+c)/2, n−1} · sd(d)/√n``, the paired t interval of the mean difference (None with fewer
    than 2)."""
    if len(d) < 2:
        return None
    half = t_quantile((1 + confidence) / 2, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return statistics.fmean(d) - half, statistics.fmean(d) + half


def mde(d: Sequence[float], alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Minimum detectable effect at the seeds run, from the spread of the per-seed differences ``d`` (None
    with fewer than 2)."""
    return detectable(statistics.stdev(d), len(d), alpha, power) if len(d) >= 2 else None


def seeds_to_decide(d: Sequence[float], threshold: float = 0.0, alpha: float = ALPHA,
                    power: float = POWER) -> int | None:
    """The smallest seed count at which the test has ``power`` against the observed ``|mean(d) − threshold|`` at
    the observed spread; None with fewer than 2 differences, a difference at the threshold, or more than
    ``MAX_SEEDS`` needed. 0 spread needs 2 seeds."""
    if len(d) < 2:
        return None
    effect, sd = abs(statistics.fmean(d) - threshold), statistics.stdev(d)
    if sd == 0:
        return 2 if effect > 0 else None
    if effect == 0:
        return None
    z = statistics.NormalDist().inv_cdf
    n = max(2, math.floor(((z(1 - alpha / 2) + z(power)) * sd / effect) ** 2))  # the normal bound is a lower bound
    while n <= MAX_SEEDS:
        if detectable(sd, n, alpha, power) <= effect:
            return n
        n += 1 if n < 1000 else max(1, n // 1000)
    return None
