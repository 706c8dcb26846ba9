"""PNG of a run's learning curves (matplotlib, headless)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

PANELS = (
    ("eval/greedy_accuracy", "held-out greedy accuracy"),
    ("reward/total", "mean reward (train rollouts)"),
    ("train/accuracy", "sampled accuracy (train rollouts)"),
    ("policy/entropy", "entropy"),
    ("policy/kl_old", "approx. KL to behaviour policy"),
    ("response/length", "response length"),
)


def plot_run(rows: list[dict[str, Any]], out: Path, title: str = "",
             panels: tuple[tuple[str, str], ...] = PANELS) -> None:
    """Six panels (metric key, title) of ``rows`` against their step; evaluation keys (``eval/*``) with markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, label) in zip(axes.flat, panels):
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if key.startswith("eval/") else None, ms=3)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(out).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    tmp.replace(out)
