"""UnicycleID: a Jackal-style differential-drive robot with 8 unknown physical parameters, the system-
identification demo of QOED ("Quasi-Optimal Experimental Design for Active System Identification",
arXiv:2605.12084).

State ``s = (x, y, yaw, v, ω)``, control ``u = (u_v, u_ω) ∈ [−1, 1] × [−π/2, π/2]``, parameters
``θ = (m, c, k_1..k_4, b_v, b_ω)``: mass, viscous friction, four wheel gains, a constant drag force and a turning
bias. The wheels act only through their summed gain ``k = ½ Σ k_j`` (only the sum is identifiable, and with the
mass only the ratios ``(c, k, b_v, b_ω)/m``: the yaw inertia is proportional to m). One Euler step
of length ``dt`` (wheel base ``L``, yaw inertia ``I = max(½ m L², 10⁻³)``, mass floored at 0.1, friction and drag
at 0)::

    v'   = v + dt·(k·u_v − c·v − b_v)/m          ω'  = ω + dt·½L·(k·u_ω + b_ω)/I
    x'   = x + dt·v'·cos(yaw)                     y'  = y + dt·v'·sin(yaw)        yaw' = wrap(yaw + dt·ω')

Observation ``g(s) = (x, y, yaw, v cos yaw, v sin yaw, ω)`` plus Gaussian noise of std ``noise_std``. The true θ
of an episode is the prior mean plus one prior-std draw, floored at ``THETA_MIN``. The environment's observation
is the noisy measurement; ``info["state"]`` carries the true state the planner starts from.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from polo.control.envs.registration import gymnasium

PARAM_NAMES = ("mass", "friction", "gain_fl", "gain_fr", "gain_rl", "gain_rr", "bias_v", "bias_w")
WHEEL_GAINS = slice(2, 6)
THETA_PRIOR_MEAN = (20.0, 1.0, 23.5, 23.5, 23.5, 23.5, 0.0, 0.0)
THETA_PRIOR_STD = (10.0, 0.5, 2.0, 2.0, 2.0, 2.0, 50.0, 50.0)
THETA_MIN = (10.0, 0.4, 2.0, 2.0, 2.0, 2.0, 0.0, 0.0)
WHEEL_BASE = 0.37559
ACTION_LOW = (-1.0, -math.pi / 2)
ACTION_HIGH = (1.0, math.pi / 2)
YAW = 2
"""Index of the yaw angle in both the state and the observation."""


def wrap_angle(a: Tensor) -> Tensor:
    """Angle in ``[−π, π)``."""
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


def unicycle_step(state: Tensor, action: Tensor, theta: Tensor, dt: float = 0.1, wheel_base: float = WHEEL_BASE
                  ) -> Tensor:
    """One step ``s' = f(s, u; θ)`` with ``state [..., 5]``, ``action [..., 2]``, ``theta [..., 8]`` broadcast
    against each other (the planner rolls out every sample × perturbed θ at once)."""
    x, y, yaw, v, w = state.unbind(-1)
    u_v, u_w = action.unbind(-1)
    mass = theta[..., 0].clamp_min(0.1)
    friction = theta[..., 1].clamp_min(0.0)
    gain = 0.5 * theta[..., WHEEL_GAINS].sum(-1)
    inertia = (0.5 * mass * wheel_base ** 2).clamp_min(1e-3)
    v2 = v + dt * (gain * u_v - friction * v - theta[..., 6].clamp_min(0.0)) / mass
    w2 = w + dt * 0.5 * wheel_base * (gain * u_w + theta[..., 7]) / inertia
    x2, y2 = x + dt * v2 * torch.cos(yaw), y + dt * v2 * torch.sin(yaw)
    return torch.stack(torch.broadcast_tensors(x2, y2, wrap_angle(yaw + dt * w2), v2, w2), -1)


def unicycle_observe(state: Tensor) -> Tensor:
    """``g(s) = (x, y, yaw, v cos yaw, v sin yaw, ω)`` ``[..., 6]``."""
    x, y, yaw, v, w = state.unbind(-1)
    return torch.stack([x, y, yaw, v * torch.cos(yaw), v * torch.sin(yaw), w], -1)


def observation_difference(a: Tensor, b: Tensor) -> Tensor:
    """``a − b`` of observations ``[..., 6]`` with the yaw difference wrapped to ``[−π, π)``."""
    d = a - b
    return torch.cat([d[..., :YAW], wrap_angle(d[..., YAW:YAW + 1]), d[..., YAW + 1:]], -1)


def identifiable_parameters(theta: Tensor) -> Tensor:
    """The combinations the demo scores, ``(m, c, Σk, b_v, b_ω)`` ``[..., 5]`` of ``θ [..., 8]``. Data fix them only
    up to one common scale: multiplying m, c, k_j, b_v and b_ω by the same factor leaves every step unchanged (away
    from the floors), so the absolute level rests on the prior and ``mass_ratios`` is what data identify."""
    return torch.cat([theta[..., :2], theta[..., WHEEL_GAINS].sum(-1, keepdim=True), theta[..., 6:]], -1)


def mass_ratios(theta: Tensor) -> Tensor:
    """``(c, k, b_v, b_ω)/m`` ``[..., 4]`` with ``k = ½ Σ k_j``: the combinations the dynamics depend on."""
    mass = theta[..., :1].clamp_min(0.1)
    return torch.cat([theta[..., 1:2], 0.5 * theta[..., WHEEL_GAINS].sum(-1, keepdim=True), theta[..., 6:]], -1) / mass


class UnicycleID(gymnasium().Env):
    """Drive toward ``goal`` while the dynamics parameters are unknown; reward ``−‖(x, y) − goal‖`` after each step,
    truncation after ``max_steps``. ``info``: ``state`` (true next state), ``goal_distance``."""

    metadata = {"render_modes": []}

    def __init__(self, goal: tuple[float, float] = (5.0, 5.0), max_steps: int = 200, dt: float = 0.1,
                 noise_std: float = 0.05):
        gym = gymnasium()
        self.goal = np.asarray(goal, dtype=np.float64)
        self.max_steps, self.dt, self.noise_std = int(max_steps), float(dt), float(noise_std)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (6,), np.float64)
        self.action_space = gym.spaces.Box(np.array(ACTION_LOW), np.array(ACTION_HIGH), dtype=np.float64)
        self.theta = np.asarray(THETA_PRIOR_MEAN, dtype=np.float64)
        self.state = np.zeros(5)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """A new episode at the origin, heading along x, at rest; θ drawn from the prior (or ``options["theta"]``)."""
        super().reset(seed=seed)
        z = self.np_random.standard_normal(len(PARAM_NAMES))
        drawn = np.maximum(np.asarray(THETA_PRIOR_MEAN) + np.asarray(THETA_PRIOR_STD) * z, THETA_MIN)
        self.theta = np.asarray((options or {}).get("theta", drawn), dtype=np.float64)
        self.state, self.steps = np.zeros(5), 0
        return self._observe(), {"state": self.state.copy(), "theta": self.theta.copy()}

    def step(self, action):
        u = np.clip(np.asarray(action, dtype=np.float64), self.action_space.low, self.action_space.high)
        self.state = unicycle_step(torch.from_numpy(self.state), torch.from_numpy(u), torch.from_numpy(self.theta),
                                   self.dt).numpy()
        self.steps += 1
        distance = float(np.linalg.norm(self.state[:2] - self.goal))
        info = {"state": self.state.copy(), "goal_distance": distance}
        return self._observe(), -distance, False, self.steps >= self.max_steps, info

    def _observe(self) -> np.ndarray:
        clean = unicycle_observe(torch.from_numpy(self.state)).numpy()
        return clean + self.noise_std * self.np_random.standard_normal(clean.shape)
