"""Mutation-testing kills for the episode terms on step rows (polo/core/advantages/episode_terms.py)."""
import pytest
import torch

from polo.core.advantages.episode_terms import episode_advantage, trajectory_advantage, trajectory_mean

from .helpers import close


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def test_stats_over_trajectories_without_traj_is_refused_with_the_callers_name():
    with pytest.raises(ValueError, match="^advantage x: stats_over trajectories needs the traj input$"):
        episode_advantage(t([1.0, 0.0]), torch.zeros(2, dtype=torch.long), None, "mean", "trajectories", 1e-6,
                          "advantage x")


def test_eps_reaches_the_group_z_score_with_and_without_traj():
    # rewards 1, 0 in one group, steps statistics: mean 0.5, std_u 0.70711; eps = 0.5: ±0.5/1.20711 = ±0.41421
    reward, group = t([1.0, 0.0]), torch.zeros(2, dtype=torch.long)
    expected = [0.5 / (0.5**0.5 + 0.5), -0.5 / (0.5**0.5 + 0.5)]
    close(episode_advantage(reward, group, None, "mean_std", "steps", 0.5, "x"), expected)
    close(episode_advantage(reward, group, torch.tensor([0, 1]), "mean_std", "steps", 0.5, "x"), expected)


def test_a_trajectory_across_groups_is_refused_with_the_callers_name():
    reward, group, traj = t([1.0, 0.0, 0.5]), torch.tensor([0, 1, 1]), torch.tensor([7, 7, 8])
    with pytest.raises(ValueError, match="^advantage x: a trajectory id spans several groups"):
        episode_advantage(reward, group, traj, "mean", "steps", 1e-6, "advantage x")
    tinv = torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="^advantage y: a trajectory id spans several groups"):
        trajectory_advantage(reward, group, traj, tinv, 2, 1e-6, "advantage y")


def test_trajectory_mean_has_one_entry_per_trajectory_even_without_rows():
    # trajectories 0: rows 1, 3 → 2; 1: row 5 → 5; 2: no row → 0 (the count is floored at 1)
    close(trajectory_mean(t([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), 3), [2.0, 5.0, 0.0])
