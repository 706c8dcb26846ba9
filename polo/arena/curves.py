"""Learning curves over seeds: the mean and a 95 % bootstrap band of a metric, versus step or wall-clock.

Each seed's curve is interpolated linearly onto a common grid (versus step: the steps the seeds logged;
versus wall-clock: evenly spaced training seconds, ``elapsed_s``) that ends where the entry's shortest run
ends, so every point averages all seeds (runs cut by a time budget end at different steps). Per-step
metrics (the reward) are first smoothed per seed with a centred moving average.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polo.arena.stats import bootstrap_ci
from polo.arena.summary import RunResult

BAND_RESAMPLES = 1000
TIME_POINTS = 80
SMOOTH_FRACTION = 0.04
"""Moving-average window of per-step metrics, as a fraction of the run's steps."""


@dataclass
class Curve:
    x: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average of width ``window`` (shrinking at the ends)."""
    if window <= 1 or len(y) < 3:
        return y
    kernel = np.ones(window)
    return np.convolve(y, kernel, mode="same") / np.convolve(np.ones_like(y), kernel, mode="same")


def series(run: RunResult, key: str, x_key: str, smoothed: bool) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of ``key`` in a run, x being ``step`` or ``elapsed_s`` (0 at the step-0 evaluation)."""
    points = [(r.get(x_key) or 0.0, r[key]) for r in run.rows if r.get(key) is not None]
    if not points:
        return np.zeros(0), np.zeros(0)
    x, y = (np.asarray(v, dtype=float) for v in zip(*points))
    if smoothed:
        y = smooth(y, max(1, round(len(y) * SMOOTH_FRACTION)))
    return x, y


def _band(x: np.ndarray, data: list[tuple[np.ndarray, np.ndarray]]) -> Curve:
    """Interpolate every seed's (x, y) at ``x`` and take the mean and bootstrap band over seeds at each point."""
    table = np.stack([np.interp(x, sx, sy) for sx, sy in data], axis=1)
    stats = [bootstrap_ci(row, resamples=BAND_RESAMPLES) for row in table]
    return Curve(x, *(np.array([getattr(s, f) for s in stats]) for f in ("mean", "low", "high")))


def curve(runs: list[RunResult], key: str, x_key: str, smoothed: bool = False) -> Curve:
    """Mean and band over ``runs`` of ``key`` versus ``x_key`` (``step`` or ``elapsed_s``)."""
    data = [d for d in (series(r, key, x_key, smoothed) for r in runs) if len(d[0])]
    if not data:
        return Curve(*(np.zeros(0) for _ in range(4)))
    end = min(x[-1] for x, _ in data)
    if x_key == "step":
        grid = np.array(sorted({v for x, _ in data for v in x if v <= end}), dtype=float)
    else:
        grid = np.linspace(min(x[0] for x, _ in data), end, TIME_POINTS)
    return _band(grid, data)

