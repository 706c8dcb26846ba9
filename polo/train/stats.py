"""Per-step diagnostics of a scored rollout batch (rewards, accuracy, advantages, lengths)."""
from __future__ import annotations

import torch

from polo.core.batch import RolloutBatch


def group_reward_spread(reward: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """max − min of the scalar reward within each group, ``[num_groups]``."""
    _, index = torch.unique(group, return_inverse=True)
    n = int(index.max()) + 1
    high = torch.full((n,), -torch.inf).scatter_reduce(0, index, reward, "amax")
    low = torch.full((n,), torch.inf).scatter_reduce(0, index, reward, "amin")
    return high - low


def rollout_metrics(batch: RolloutBatch, correct: torch.Tensor) -> dict[str, float]:
    mask = batch.mask
    n = mask.sum().clamp_min(1)
    reward = batch.scalar_reward()
    row = {f"reward/{name}": float(batch.rewards[:, k].mean()) for k, name in enumerate(batch.reward_names)}
    row["reward/total"] = float(reward.mean())
    row["train/accuracy"] = float(correct.float().mean())
    row["frac_reward_zero_std"] = float((group_reward_spread(reward, batch.group) == 0).float().mean())
    adv = batch.advantages
    row["advantage/mean"] = float((adv * mask).sum() / n)
    row["advantage/abs_mean"] = float((adv.abs() * mask).sum() / n)
    row["advantage/std"] = float(((adv - row["advantage/mean"]) ** 2 * mask).sum().div(n).sqrt())
    row["advantage/zero_frac"] = float(((adv == 0) & (mask > 0)).sum() / n)
    row["response/length"] = float(batch.lengths.float().mean())
    row["response/truncated_frac"] = float(batch.truncated.float().mean())
    if batch.values is not None:
        row["critic/value_mean"] = float((batch.values * mask).sum() / n)
    return row
