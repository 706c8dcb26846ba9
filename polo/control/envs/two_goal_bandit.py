"""TwoGoalBandit: a one-step continuous bandit with two equally good goals, the test of a multimodal policy.

The observation is the constant ``[0.0]``, the action ``a ∈ R²``, and the reward ``max_k exp(−‖a − g_k‖²/0.5)`` with
goals ``g = (2, 0)`` (right) and ``(−2, 0)`` (left); every episode ends after its single step. A policy that
covers both goals keeps a high reward and splits its samples; a unimodal Gaussian either commits to one goal or
sits between them with reward ≈ e⁻⁸. The final step's info holds ``goal_left``, ``goal_right`` (1 when the action
lies within squared distance 0.5 of that goal) and ``near_goal`` (either), so PPO's evaluation reports the split.
"""
from __future__ import annotations

import numpy as np

from polo.control.envs.registration import gymnasium

gym = gymnasium()

GOALS = np.array([[2.0, 0.0], [-2.0, 0.0]])
WIDTH = 0.5
"""Both the reward's squared length scale and the squared radius that counts as reaching a goal."""


class TwoGoalBandit(gym.Env):
    """``polo/TwoGoalBandit-v0`` (PolicyFlow's smallest demo, arXiv:2602.01156)."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(2)
        if not np.all(np.isfinite(a)):
            raise ValueError(f"TwoGoalBandit: the action must be finite, got {a.tolist()}")
        sq = ((a[None, :] - GOALS) ** 2).sum(-1)
        right, left = float(sq[0] < WIDTH), float(sq[1] < WIDTH)
        info = {"goal_right": right, "goal_left": left, "near_goal": max(right, left)}
        return np.zeros(1, np.float32), float(np.exp(-sq / WIDTH).max()), True, False, info
