"""The rich progress bar of polo's long phases (training steps, warm starts): one look, built in one place."""
from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def progress_bar(label: str, total: int, start: int = 0, console: Console | None = None
                 ) -> tuple[Progress, Callable[[int, str], None]]:
    """A bar ``label ━━━ step/total elapsed info`` (a context manager: shown while entered) and its
    ``update(step, info)``; on ``console`` (default: a console on stderr)."""
    bar = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[info]}"), console=console or Console(stderr=True), transient=False)
    task = bar.add_task(label, total=total, completed=start, info="")

    def update(step: int, info: str) -> None:
        bar.update(task, completed=step, info=info)

    return bar, update
