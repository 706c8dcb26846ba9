"""The arena's figures: one PNG per (metric, x axis), a line and a shaded 95 % band per entry."""
from __future__ import annotations

import io
from dataclasses import dataclass

from polo.arena.curves import curve_vs_step, curve_vs_time
from polo.arena.summary import ACCURACY, REWARD, EntrySummary

FIGURES = (
    # file stem, metric, x axis, smoothed, title
    ("accuracy_vs_step", ACCURACY, "step", False, "held-out greedy accuracy vs step"),
    ("accuracy_vs_time", ACCURACY, "time", False, "held-out greedy accuracy vs training time"),
    ("reward_vs_step", REWARD, "step", True, "mean reward (train rollouts, smoothed) vs step"),
    ("reward_vs_time", REWARD, "time", True, "mean reward (train rollouts, smoothed) vs training time"),
)


@dataclass
class Figure:
    stem: str
    title: str
    png: bytes


def _plot(entries: list[EntrySummary], key: str, axis: str, smoothed: bool, title: str, target: float | None) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = plt.get_cmap("tab10")
    for i, entry in enumerate(entries):
        fn = curve_vs_step if axis == "step" else curve_vs_time
        c = fn(entry.runs, key, smoothed)
        if not len(c.x):
            continue
        ax.plot(c.x, c.mean, color=colors(i % 10), label=entry.label, lw=1.6,
                marker="o" if key == ACCURACY and axis == "step" else None, ms=2.5)
        ax.fill_between(c.x, c.low, c.high, color=colors(i % 10), alpha=0.18, lw=0)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_xlabel("step" if axis == "step" else "training seconds")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def figures(entries: list[EntrySummary], target: float) -> list[Figure]:
    """Every figure of the report, as PNG bytes."""
    return [Figure(stem, title, _plot(entries, key, axis, smoothed, title, target if key == ACCURACY else None))
            for stem, key, axis, smoothed, title in FIGURES]
