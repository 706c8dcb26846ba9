"""The arena's figures: one PNG per (metric, x axis); per entry, a thin line per seed under the mean over
seeds and its shaded 95 % band."""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polo.arena.curves import curve, series
from polo.arena.summary import ACCURACY, REWARD, EntrySummary

if TYPE_CHECKING:
    import matplotlib.figure

FIGURES = (
    # file stem, metric, x axis (a metrics key), smoothed, title
    ("accuracy_vs_step", ACCURACY, "step", False, "held-out greedy accuracy vs step"),
    ("accuracy_vs_time", ACCURACY, "elapsed_s", False, "held-out greedy accuracy vs training time"),
    ("reward_vs_step", REWARD, "step", True, "mean reward (train rollouts, smoothed) vs step"),
    ("reward_vs_time", REWARD, "elapsed_s", True, "mean reward (train rollouts, smoothed) vs training time"),
)
SEED_LINE = {"lw": 0.7, "alpha": 0.45}


@dataclass
class Figure:
    stem: str
    title: str
    png: bytes


def draw(entries: list[EntrySummary], key: str, x_key: str, smoothed: bool, title: str,
         target: float | None) -> "matplotlib.figure.Figure":
    """The figure of ``key`` versus ``x_key``; every line's gid names it: ``<label>_s<seed>`` for a seed's
    run, ``<label>_mean`` for the mean over seeds."""
    import matplotlib
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(7, 4.2))
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for i, entry in enumerate(entries):
        color = colors(i % 10)
        for run in entry.runs:
            ax.plot(*series(run, key, x_key, smoothed), color=color, gid=f"{entry.label}_s{run.seed}", **SEED_LINE)
        c = curve(entry.runs, key, x_key, smoothed)
        if not len(c.x):
            continue
        ax.plot(c.x, c.mean, color=color, label=entry.label, lw=1.8, gid=f"{entry.label}_mean",
                marker="o" if key == ACCURACY and x_key == "step" else None, ms=2.5)
        ax.fill_between(c.x, c.low, c.high, color=color, alpha=0.18, lw=0)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_xlabel("step" if x_key == "step" else "training seconds")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def png(fig: "matplotlib.figure.Figure") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def figures(entries: list[EntrySummary], target: float) -> list[Figure]:
    """Every figure of the report, as PNG bytes."""
    return [Figure(stem, title, png(draw(entries, key, x_key, smoothed, title, target if key == ACCURACY else None)))
            for stem, key, x_key, smoothed, title in FIGURES]
