"""``RUN/samples.jsonl``: a few rows of every N-th step's batch (``train.log_samples_every``), with a short
table of them in the run's log."""
from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from polo.train.callbacks import Callback, kept_step
from polo.train.metrics import MetricsLog
from polo.train.stats import present_mask


def render_table(rows: list[dict[str, Any]], title: str, width: int = 120) -> str:
    """``rows`` (dicts with the same keys) as a plain-text table, one column per key."""
    table = Table(title=title, title_justify="left")
    for key in rows[0] if rows else ():
        table.add_column(key, overflow="fold")
    for row in rows:
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()))
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(table)
    return console.file.getvalue().rstrip()


def sample_records(rollouts, tokenizer, rows: list[int], step: int) -> list[dict[str, Any]]:
    """One record per batch row: the prompt as the model sees it (special and chat-template tokens kept,
    padding dropped), the completion, each reward component by name (None where it did not score the row),
    the total reward, the sequence-level advantage (mean over the row's valid tokens) and the verdict."""
    batch = rollouts.batch
    total = batch.scalar_reward()
    mask = batch.mask
    advantage = (batch.advantages * mask).sum(-1) / mask.sum(-1).clamp_min(1)
    present = present_mask(batch)
    records = []
    for i in rows:
        prompt = tokenizer.decode(batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist(), skip_special_tokens=False)
        records.append({
            "step": step,
            "prompt": prompt,
            "completion": rollouts.completions[i],
            "rewards": {name: float(batch.rewards[i, k]) if present[i, k] else None
                        for k, name in enumerate(batch.reward_names)},
            "reward": float(total[i]),
            "advantage": float(advantage[i]),
            "correct": bool(rollouts.correct[i]),
        })
    return records


class SampleLog(Callback):
    """Every ``every`` steps, ``count`` rows spread over the batch to ``RUN/samples.jsonl`` and the log; lines
    after the checkpoint a run resumes from are dropped (``MetricsLog.truncate_after``)."""

    def __init__(self, every: int, count: int):
        self.every, self.count = every, count

    def on_train_begin(self, trainer) -> None:
        self.log = MetricsLog(trainer.run_dir / "samples.jsonl")
        self.log.truncate_after(kept_step(trainer))

    def on_step_end(self, trainer, row, rollouts) -> None:
        step = row["step"]
        if step % self.every:
            return
        B = rollouts.batch.batch_size
        rows = sorted({i * B // self.count for i in range(min(self.count, B))})
        records = sample_records(rollouts, trainer.policy.tokenizer, rows, step)
        for record in records:
            self.log.write(record)
        brief = [{"prompt": r["prompt"], "completion": r["completion"], "reward": r["reward"],
                  "advantage": r["advantage"]} for r in records]
        trainer.log(escape(render_table(brief, f"samples at step {step}")))
