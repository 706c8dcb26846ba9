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

TRAIN_RETURN = "train/episode_return"
"""A control run's training curve, in place of the language-model runs' mean reward."""


def figure_specs(metric: str) -> list[tuple[str, str, str, bool, str]]:
    """(file stem, metrics key, x axis key, smoothed, title) of every figure, for the arena's ``metric``."""
    if metric == ACCURACY:
        evaluated, train, train_name = "held-out greedy accuracy", REWARD, "mean reward (train rollouts, smoothed)"
    else:
        evaluated, train, train_name = metric, TRAIN_RETURN, "training episode return (smoothed)"
    return [("accuracy_vs_step", metric, "step", False, f"{evaluated} vs step"),
            ("accuracy_vs_time", metric, "elapsed_s", False, f"{evaluated} vs training time"),
            ("reward_vs_step", train, "step", True, f"{train_name} vs step"),
            ("reward_vs_time", train, "elapsed_s", True, f"{train_name} vs training time")]


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
                marker="o" if key.startswith("eval/") and x_key == "step" else None, ms=2.5)
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


def figures(entries: list[EntrySummary], target: float, metric: str = ACCURACY) -> list[Figure]:
    """Every figure of the report, as PNG bytes (``metric``: the arena's evaluation metric)."""
    return [Figure(stem, title, png(draw(entries, key, x_key, smoothed, title, target if key == metric else None)))
            for stem, key, x_key, smoothed, title in figure_specs(metric)]
