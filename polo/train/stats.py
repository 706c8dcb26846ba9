"""Per-step diagnostics of a scored rollout batch (rewards, accuracy, advantages, lengths)."""
from __future__ import annotations

import torch

from polo.core.batch import RolloutBatch
from polo.core.segment import group_reward_spread


def present_mask(batch: RolloutBatch) -> torch.Tensor:
    """``[B, K]``: which reward components scored each row (``extras["reward_present"]``, else all)."""
    present = batch.extras.get("reward_present")
    return torch.ones_like(batch.rewards, dtype=torch.bool) if present is None else present.bool()


def present_means(batch: RolloutBatch) -> torch.Tensor:
    """``[K]`` each reward component's mean over the samples it scored (False in ``extras["reward_present"]``
    where a reward returned None, as TRL's ``nanmean``); NaN if it scored none."""
    present = present_mask(batch)
    return (batch.rewards * present).sum(0) / present.sum(0)


def rollout_metrics(batch: RolloutBatch, correct: torch.Tensor) -> dict[str, float]:
    mask = batch.mask
    n = mask.sum().clamp_min(1)
    reward = batch.scalar_reward()
    means = present_means(batch)
    row = {f"reward/{name}": float(means[k]) for k, name in enumerate(batch.reward_names)}
    row["reward/total"] = float(reward.mean())
    row["train/accuracy"] = float(correct.float().mean())
    row["frac_reward_zero_std"] = float((group_reward_spread(reward, batch.group) == 0).float().mean())
    adv = batch.advantages
    row["advantage/mean"] = float((adv * mask).sum() / n)
    row["advantage/abs_mean"] = float((adv.abs() * mask).sum() / n)
    row["advantage/abs_max"] = float((adv.abs() * mask).max()) if mask.numel() else 0.0
    row["advantage/std"] = float(((adv - row["advantage/mean"]) ** 2 * mask).sum().div(n).sqrt())
    row["advantage/zero_frac"] = float(((adv == 0) & (mask > 0)).sum() / n)
    row["response/length"] = float(batch.lengths.float().mean())
    row["response/truncated_frac"] = float(batch.truncated.float().mean())
    if batch.ref_logp is not None:
        row["kl/behaviour_ref"] = float(((batch.old_logp - batch.ref_logp) * mask).sum() / n)
    if batch.values is not None:
        row["critic/value_mean"] = float((batch.values * mask).sum() / n)
    return row


def advantage_diagnostics(batch: RolloutBatch) -> dict[str, float]:
    """Zero-advantage groups, and the sign-flip rate of each sample's advantage (at its first valid token)
    against the leave-one-out reference ``R_i − mean_{j≠i} R_j`` (MC-GRPO's argument), counted over
    samples whose reference is non-zero."""
    mask = batch.response_mask.bool()
    adv = batch.advantages
    first = mask.long().argmax(-1)
    seq_adv = adv.gather(1, first[:, None]).squeeze(1) * mask.any(-1)
    _, index = torch.unique(batch.group, return_inverse=True)
    n = int(index.max()) + 1
    abs_sum = torch.zeros(n).index_add(0, index, (adv.abs() * mask).sum(-1).float())
    reward = batch.scalar_reward().float()
    size = torch.zeros(n).index_add(0, index, torch.ones_like(reward))
    total = torch.zeros(n).index_add(0, index, reward)
    others = (size[index] - 1).clamp_min(1)
    loo = torch.where(size[index] > 1, reward - (total[index] - reward) / others, reward)
    ref = loo.abs() > 1e-9
    flips = (torch.sign(seq_adv) != torch.sign(loo)) & ref
    return {
        "frac_zero_adv_groups": float((abs_sum == 0).float().mean()),
        "advantage/sign_flip_vs_loo": float(flips.sum() / ref.sum().clamp_min(1)),
    }
