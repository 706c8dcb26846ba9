"""The episode-level advantage terms that estimators on step rows (one batch row per turn) build on.

``episode_advantage`` is the episode term of GiGPO ("Group-in-Group Policy Optimization for LLM Agent Training",
arXiv:2505.10978): the episode reward centred (and scaled) by its task group's statistics, over every step row
or one value per trajectory; ``trajectory_mean`` averages row values per trajectory, and
``trajectory_advantage`` is the GRPO z-score of such a per-trajectory value over the trajectories of each task
group.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.step_inputs import trajectories
from polo.core.agent_primitives import group_moments, group_norm
from polo.core.segment import segment_sum


def episode_advantage(reward: Tensor, group: Tensor, traj: Tensor | None, mode: str, stats_over: str, eps: float,
                      who: str) -> Tensor:
    """GiGPO's episode term ``A^E`` per step row, ``[N]``: ``R_n − mean(S_g)`` (``mode="mean"``) or divided by
    ``std_u(S_g) + eps`` (``"mean_std"``). ``S_g`` holds every step row of the task group g
    (``stats_over="steps"``) or one value per trajectory, its rows' mean (``"trajectories"``, needs ``traj``);
    a one-member ``S_g`` gives mean 0, std 1. ``traj`` (when given) is checked to stay inside one group."""
    if traj is None:
        if stats_over == "trajectories":
            raise ValueError(f"{who}: stats_over trajectories needs the traj input")
        return group_norm(reward, group, mode, eps=eps)
    tinv, n_traj, _ = trajectories(traj, group, who)
    if stats_over != "trajectories":
        return group_norm(reward, group, mode, eps=eps)
    # One statistics member per trajectory (its first row), valued at the mean of its rows' rewards
    # (all equal unless the engine penalized some turns).
    traj_reward = group_moments(reward, tinv, singleton="self_mean")[0]
    rows = torch.arange(len(reward), device=reward.device)
    first = torch.full((n_traj,), len(reward), dtype=torch.long, device=reward.device).scatter_reduce(
        0, tinv, rows, "amin")
    members = torch.zeros(len(reward), dtype=torch.bool, device=reward.device)
    members[first] = True
    mean, std, _ = group_moments(traj_reward, group, members)
    a_ep = reward - mean
    return a_ep / (std + eps) if mode == "mean_std" else a_ep


def trajectory_mean(values: Tensor, tinv: Tensor, n_traj: int) -> Tensor:
    """Per-trajectory mean of the rows' ``values``, ``[n_traj]``."""
    count = segment_sum(torch.ones_like(values), tinv, n_traj)
    return segment_sum(values, tinv, n_traj) / count.clamp_min(1)


def trajectory_advantage(values: Tensor, group: Tensor, traj: Tensor, tinv: Tensor, n_traj: int, eps: float,
                         who: str) -> Tensor:
    """Per row ``[N]``: ``(v_i − mean_g v)/(std_u,g v + eps)`` with ``v_i`` the mean of trajectory i's row
    ``values`` and the statistics over one value per trajectory of the task group g (a group of one trajectory:
    mean 0, std 1); ``episode_advantage`` with one member per trajectory. Constant over the rows of a
    trajectory."""
    per_row = trajectory_mean(values, tinv, n_traj)[tinv]
    return episode_advantage(per_row, group, traj, "mean_std", "trajectories", eps, who)
