"""TRL's ``GRPOTrainer`` metric names beside polo's own (docs/logging.md has the table): copies of the polo
metrics that mean the same, the others computed from the step's rollouts the way TRL computes them."""
from __future__ import annotations

import torch

from polo.core.segment import group_stats
from polo.train.callbacks import Callback, kept_step
from polo.train.stats import present_mask

ALIASES = {
    "reward": "reward/total",
    "completions/clipped_ratio": "response/truncated_frac",
    "clip_ratio/low_mean": "policy/clip_frac_low",
    "clip_ratio/high_mean": "policy/clip_frac_high",
    "entropy": "policy/entropy",
    "kl": "policy/kl_ref",
}
"""TRL name → the polo metric with its meaning (copied only when the step's row has it)."""


def _std(x: torch.Tensor) -> float:
    """Sample standard deviation (Bessel-corrected, as TRL's ``torch.std`` and ``nanstd``); 0 for one value."""
    return float(x.std()) if x.numel() > 1 else 0.0


def group_std(reward: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """``[B]``: the sample standard deviation of each row's group's rewards (0 for a group of one)."""
    _, std, count = group_stats(reward, group)
    return torch.where(count == 1, 0.0, std)


def trl_metrics(batch, max_new_tokens: int) -> dict[str, float]:
    """The TRL metrics polo does not already log, for one scored batch (``num_tokens``: this step's only)."""
    # a truncated completion has max_new_tokens tokens even where rollout.mask_truncated masked them out
    lengths = torch.where(batch.truncated, max_new_tokens, batch.lengths).float()
    row = {
        "reward_std": float(group_std(batch.scalar_reward().float(), batch.group).mean()),
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "num_tokens": float(batch.prompt_mask.sum() + lengths.sum()),
    }
    present = present_mask(batch)
    for k, name in enumerate(batch.reward_names):
        row[f"rewards/{name}/std"] = _std(batch.rewards[present[:, k], k].float())
    return row


class TrlMetrics(Callback):
    """Adds TRL's names to every step's row; ``num_tokens`` counts prompt and completion tokens since step 1,
    continued from the checkpoint's row on resume."""

    def on_train_begin(self, trainer) -> None:
        step = kept_step(trainer)
        rows = [r for r in trainer.metrics.read() if r["step"] <= step] if step >= 0 else []
        self.num_tokens = next((r["num_tokens"] for r in reversed(rows) if "num_tokens" in r), 0.0)

    def on_step_end(self, trainer, row, rollouts) -> None:
        extra = trl_metrics(rollouts.batch, trainer.max_new_tokens)
        self.num_tokens += extra["num_tokens"]
        extra["num_tokens"] = self.num_tokens
        row.update({trl: row[polo] for trl, polo in ALIASES.items() if polo in row})
        row.update({f"rewards/{name}/mean": row[f"reward/{name}"] for name in rollouts.batch.reward_names})
        if "clip_ratio/low_mean" in row and "clip_ratio/high_mean" in row:
            row["clip_ratio/region_mean"] = row["clip_ratio/low_mean"] + row["clip_ratio/high_mean"]
        row.update(extra)
