"""STL-Nav2D (``polo/STLNav2D-v0``): a 2-D single integrator that must satisfy an STL formula, made Markovian by
TGPO's time grounding (TGPO: Temporal Grounded Policy Optimization for Signal Temporal Logic Tasks,
arXiv:2510.00225; the environment is polo's own reconstruction).

Dynamics ``x_{t+1} = x_t + 0.1·clip(u, −1, 1)``, ``x_0 = 0``, horizon H = 50. Tasks (``task=``):

* ``any_order``: ``F_[0,50] reach A ∧ F_[0,50] reach B ∧ G_[0,50] ¬O``;
* ``ordered``: ``F_[0,20] reach A ∧ F_[25,50] reach B ∧ G_[0,50] ¬O`` (tight, ordered windows);

A = ball((1.5, 1), 0.3), B = ball((−1.5, 1), 0.3), O = ball((0, 0.9), 0.5) sits between them.

An episode runs with a time allocation τ (one integer per subgoal, inside its window): given at reset as
``options={"tau": ...}``, else ``next_tau`` (a training method sets it per copy), else drawn uniformly. The
subgoals are taken in increasing τ (ties by index); the active one is the first not yet reached. Observation
``[x, t/H, τ/H, f, c_k − x, (τ_k − t)/H]`` (f: reached flags; the last two zero once all are reached). Reward per
step ``w_prog·(‖x_t − c_k‖ − ‖x_{t+1} − c_k‖) − w_dist·‖x_{t+1} − c_k‖ − w_inv·1[an invariant fails at t+1]
+ w_sub·1[the active subgoal is reached at t+1 ≤ τ_k] + w_succ·1[t+1 = H and ρ(φ, x_{0:H}) > 0]``; reaching the
active subgoal late sets its flag without the bonus (τ_k acts as a deadline). The last step's info holds
``success`` (0/1: ρ(φ) > 0 of the whole trajectory) and ``robustness`` ρ(φ).
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from polo.control.math.stl import Always, And, Eventually, avoid, ball_margin, ground, progress_reward, reach

GOAL_A, GOAL_B, GOAL_RADIUS = (1.5, 1.0), (-1.5, 1.0), 0.3
OBSTACLE, OBSTACLE_RADIUS = (0.0, 0.9), 0.5
TASK_WINDOWS = {"any_order": ((0, 50), (0, 50)), "ordered": ((0, 20), (25, 50))}


def nav2d_formula(task: str, horizon: int):
    """φ of ``task`` over ``horizon`` steps."""
    if task not in TASK_WINDOWS:
        raise ValueError(f"STLNav2D task {task!r}: expected one of {', '.join(TASK_WINDOWS)}")
    (a0, b0), (a1, b1) = TASK_WINDOWS[task]
    return And((Eventually(reach(GOAL_A, GOAL_RADIUS), a0, b0), Eventually(reach(GOAL_B, GOAL_RADIUS), a1, b1),
                Always(avoid(OBSTACLE, OBSTACLE_RADIUS), 0, horizon)))


class STLNav2D(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": []}

    def __init__(self, task: str = "any_order", horizon: int = 50, step_size: float = 0.1, w_prog: float = 2.0,
                 w_dist: float = 0.0, w_inv: float = 1.0, w_sub: float = 1.0, w_succ: float = 5.0):
        if horizon < 1:
            raise ValueError(f"STLNav2D horizon must be >= 1, got {horizon}")
        self.task, self.horizon, self.step_size = task, int(horizon), float(step_size)
        self.weights = dict(prog=w_prog, dist=w_dist, inv=w_inv, sub=w_sub, succ=w_succ)
        self.formula = nav2d_formula(task, self.horizon)
        self.grounding = ground(self.formula, self.horizon)
        goals = self.grounding.goals  # reach balls; the invariants are G_[a,b] avoid ball
        self.centers = np.array([g.center for g in goals])  # [m, 2]
        self.radii = np.array([g.radius for g in goals])
        self.low, self.high = np.array(self.grounding.low), np.array(self.grounding.high)
        self.invariants = [(np.array(inv.phi.center), inv.phi.radius, inv.a, inv.b)
                           for inv in self.grounding.invariants]
        m = len(goals)
        self.obs_dim = 2 + 1 + m + m + 2 + 1
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.next_tau: np.ndarray | None = None
        """The allocation the next reset uses when ``options`` gives none (None: uniform)."""
        self.tau = self.low.copy()
        self.order = list(range(len(goals)))
        self._reset_state()

    def _reset_state(self) -> None:
        self.t = 0
        self.flags = np.zeros(len(self.radii))
        self.path = np.zeros((self.horizon + 1, 2))

    # ------------------------------------------------------------------ observations
    def observations(self, x: np.ndarray, t: np.ndarray, tau: np.ndarray, flags: np.ndarray, k: np.ndarray,
                     left: np.ndarray) -> np.ndarray:
        """Augmented states ``[K, obs_dim]`` of positions ``x`` ``[K, 2]``, times ``t`` ``[K]``, allocations and
        flags ``[K, m]``, active subgoals ``k`` ``[K]`` and whether one is left ``left`` ``[K]``."""
        H = self.horizon
        to_goal = (self.centers[k] - x) * left[:, None]
        until = (tau[np.arange(len(k)), k] - t) / H * left
        return np.concatenate([x, t[:, None] / H, tau / H, flags, to_goal, until[:, None]], 1).astype(np.float32)

    def initial_observations(self, tau: np.ndarray) -> np.ndarray:
        """``s̃_0(τ)`` ``[K, obs_dim]`` for allocations ``[K, m]`` (what TGPO's critic scores)."""
        tau = np.asarray(tau, dtype=np.float64)
        K = len(tau)
        first = np.argsort(tau, axis=1, kind="stable")[:, 0]
        return self.observations(np.zeros((K, 2)), np.zeros(K), tau, np.zeros(tau.shape), first, np.ones(K))

    def _active(self) -> int | None:
        """The active subgoal: the first unreached one in increasing τ (ties by index); None when all are."""
        return next((k for k in self.order if not self.flags[k]), None)

    def _obs(self) -> np.ndarray:
        k = self._active()
        return self.observations(self.path[self.t][None], np.array([self.t]), self.tau[None].astype(np.float64),
                                 self.flags[None], np.array([k or 0]), np.array([k is not None]))[0]

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The episode in progress, the pending allocation and the random generator, as plain data (what polo's
        checkpoints save of this environment; the formula and geometry come from the constructor)."""
        tensor = lambda a: None if a is None else torch.from_numpy(np.array(a))  # noqa: E731
        rng = self._np_random
        return {"t": self.t, "tau": tensor(self.tau), "flags": tensor(self.flags), "path": tensor(self.path),
                "next_tau": tensor(self.next_tau), "rng": None if rng is None else rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        array = lambda t: None if t is None else t.numpy().copy()  # noqa: E731
        self.t, self.flags, self.path = state["t"], array(state["flags"]), array(state["path"])
        self.tau, self.next_tau = array(state["tau"]), array(state["next_tau"])
        self.order = np.argsort(self.tau, kind="stable").tolist()
        if state["rng"] is not None:
            self.np_random.bit_generator.state = state["rng"]

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        tau = (options or {}).get("tau", self.next_tau)
        if tau is None:
            tau = self.np_random.integers(self.low, self.high + 1)
        tau = np.asarray(tau)
        if tau.shape != self.low.shape or not np.all(tau == np.round(tau)) \
                or np.any(tau < self.low) or np.any(tau > self.high):
            raise ValueError(f"STLNav2D: τ must be {len(self.low)} integers in [{self.low.tolist()}, "
                             f"{self.high.tolist()}], got {tau.tolist()}")
        self.tau = tau.astype(np.int64)
        self.order = np.argsort(self.tau, kind="stable").tolist()
        self._reset_state()
        return self._obs(), {}

    def step(self, action):
        if self.t >= self.horizon:
            raise RuntimeError(f"STLNav2D: the episode ended at t = H = {self.horizon}; call reset()")
        x = self.path[self.t]
        x_next = x + self.step_size * np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        w = self.weights
        k = self._active()
        reward = 0.0
        if k is not None:
            c = self.centers[k]
            reward += w["prog"] * progress_reward(x, x_next, c) + w["dist"] * ball_margin(x_next, c, 0.0)
            if ball_margin(x_next, c, self.radii[k]) >= 0:
                self.flags[k] = 1.0
                reward += w["sub"] * (self.t + 1 <= self.tau[k])
        self.t += 1
        self.path[self.t] = x_next
        if any(a <= self.t <= b and ball_margin(x_next, c, r) > 0 for c, r, a, b in self.invariants):
            reward -= w["inv"]
        info: dict[str, Any] = {}
        terminated = self.t == self.horizon
        if terminated:
            rho = float(self.formula.robustness(torch.as_tensor(self.path[None]))[0])
            info = {"success": float(rho > 0), "robustness": rho}
            reward += w["succ"] * (rho > 0)
        return self._obs(), float(reward), terminated, False, info
