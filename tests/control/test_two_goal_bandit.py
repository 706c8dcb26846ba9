"""TwoGoalBandit: reward, one-step episodes, the goal indicators PPO's evaluation averages."""
import math

import numpy as np
import pytest

from polo.control.envs.registration import gymnasium
from polo.control.envs.vector import EnvSettings, make_vector_env


def make():
    return make_vector_env(EnvSettings(id="polo/TwoGoalBandit-v0", num_envs=3, normalize_obs=False,
                                       normalize_reward=False), 0.99)


def test_reward_terminates_and_goal_split():
    envs = make()
    obs, _ = envs.reset(seed=0)
    assert obs.tolist() == [[0.0]] * 3
    actions = np.array([[2.0, 0.5], [-2.5, 0.0], [0.0, 0.0]], np.float32)
    obs, reward, terminated, truncated, infos = envs.step(actions)
    expected = [math.exp(-0.25 / 0.5), math.exp(-0.25 / 0.5), math.exp(-4 / 0.5)]
    assert reward.tolist() == pytest.approx(expected, abs=1e-6)
    assert terminated.all() and not truncated.any() and obs.tolist() == [[0.0]] * 3
    final = infos["final_info"]
    assert final["goal_right"].tolist() == [1.0, 0.0, 0.0]
    assert final["goal_left"].tolist() == [0.0, 1.0, 0.0]
    assert final["near_goal"].tolist() == [1.0, 1.0, 0.0]


def test_boundary_of_a_goal_is_squared_distance_half():
    env = gymnasium().make("polo/TwoGoalBandit-v0").unwrapped
    env.reset(seed=0)
    inside = env.step(np.array([2.0 + math.sqrt(0.49), 0.0]))[4]
    outside = env.step(np.array([2.0 + math.sqrt(0.51), 0.0]))[4]
    assert inside["goal_right"] == 1.0 and outside["goal_right"] == 0.0 and outside["near_goal"] == 0.0


def test_non_finite_action_is_refused():
    env = gymnasium().make("polo/TwoGoalBandit-v0").unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([np.nan, 0.0]))
