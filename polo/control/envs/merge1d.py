"""Merge1D: connected vehicles merging from an on-ramp into a main lane, in one dimension (MAPPO-PIS's demo).

Two lanes share the coordinate ``x`` (m): the main lane, and a ramp whose vehicles must change to the main lane
before ``merge_end`` (a ramp vehicle past it has run into the end of the ramp). ``agents`` controlled vehicles
(``ramp_agents`` = (low, high) of them start on the ramp) and ``humans`` scripted drivers on the main lane, each
following the Intelligent Driver Model, move every ``dt`` s by ``x ← x + v·dt`` then
``v ← clamp(v + a·dt, v_min, v_max)`` (``v_min`` = 0 by default, humans always 0). Two vehicles of one lane closer
than ``threshold`` m (a car length) have collided; a collision ends the episode, otherwise it ends after ``steps``
decisions.

Each agent picks a meta-action: SLOWER / IDLE / FASTER (the accelerations ``accelerations``, by default −8, 0 and
+2 m/s²: highway-env's speed controller brakes about that hard when it drops a speed level) or MERGE (to the main
lane, keeping the speed; IDLE when already there). The shield looks ``horizon`` = 10 steps (2 s) ahead and an agent
may brake to a stop: measured over 150–300 episodes of random, always-IDLE and always-FASTER agents, that keeps
collisions at 0–1 %, while a 1 s look-ahead, or a speed floor of 10 m/s (a ramp agent that cannot wait at the end
of the ramp), leaves 8–53 % (docs/control.md). Its *intent* is the ``horizon``-step path its action
would give (polo.control.math.mappo_pis); with ``safety`` the safety module checks the agents one after the
other, most urgent first, against the other vehicles' intents and replaces an action whose predicted room falls
below ``threshold`` by the available action with the most room. The environment executes the shielded action;
the policy's own action is what the learner stores.

Observation ``[agents, d]``, one row per agent: the ego's ``[on ramp, distance to the ramp's end / 100 (0 on the
main lane), v / v_max]`` and, for its ``observed`` nearest vehicles (by ``|Δx|``), ``[present, on ramp, Δx / 100,
Δv / v_max]`` plus, with ``share_intents``, ``intent_points`` positions of that vehicle's intent (its last
executed action held for ``horizon`` steps; a human's current IDM acceleration) relative to the ego, / 100.
Action ``MultiDiscrete([4] * agents)``. Reward: the mean over agents of the merge reward (collision, speed,
ramp and headway terms), divided by ``reward_scale``. The final step's info holds ``collision`` (0/1),
``speed`` (the agents' mean speed over the episode, m/s), ``merged`` (the fraction of ramp agents that reached
the main lane) and ``shielded`` (the fraction of agent decisions the safety module replaced).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from polo.control.envs.registration import gymnasium
from polo.control.math.mappo_pis import (IDLE, MERGE, agent_rewards, intent_paths, merge_priority, safety_rooms,
                                         shield_action)
from polo.core.registry import ConfigError

gym = gymnasium()

MAIN, RAMP = 0, 1
SCALE_X = 100.0
"""Metres per observation unit."""
NO_LEADER = 100.0
"""Headway (m) of a vehicle with nobody ahead in its lane."""


def _queue(rng: np.random.Generator, count: int, gap: tuple[float, float]) -> np.ndarray:
    """``count`` positions: the last vehicle at U(0, 20) m, each next one a U(gap) m further on."""
    start = rng.uniform(0, 20)
    return start + np.concatenate([[0.0], np.cumsum(rng.uniform(*gap, max(count - 1, 0)))])[:count]


class Merge1D(gym.Env):
    """``polo/Merge1D-v0``: the on-ramp merge of "MAPPO-PIS: A Multi-Agent Proximal Policy Optimization Method with
    Prior Intent Sharing for CAVs' Cooperative Decision-Making" (arXiv:2408.06656) without highway-env."""

    metadata = {"render_modes": []}

    def __init__(self, agents: int = 3, humans: int = 2, safety: bool = True, share_intents: bool = True,
                 steps: int = 50, dt: float = 0.2, horizon: int = 10, intent_points: int = 2, observed: int = 4,
                 merge_end: float = 100.0, threshold: float = 5.0, accelerations: tuple[float, float, float] = (-8.0, 0.0, 2.0),
                 v_min: float = 0.0, v_max: float = 30.0, reward_scale: float = 20.0, ramp_agents: tuple[int, int] = (1, 2),
                 main_gap: tuple[float, float] = (30.0, 60.0), agent_speed: tuple[float, float] = (18.0, 24.0),
                 human_speed: tuple[float, float] = (20.0, 26.0), human_desired: tuple[float, float] = (25.0, 30.0)):
        if agents < 1 or humans < 0 or steps < 1 or horizon < 1 or observed < 1:
            raise ConfigError(f"Merge1D: agents ≥ 1, humans ≥ 0, steps, horizon and observed ≥ 1 expected, got "
                              f"agents={agents}, humans={humans}, steps={steps}, horizon={horizon}, observed={observed}")
        if not 1 <= intent_points <= horizon:
            raise ConfigError(f"Merge1D: intent_points must lie in 1..horizon={horizon}, got {intent_points}")
        lo, hi = ramp_agents
        if not 0 <= lo <= hi <= agents:
            raise ConfigError(f"Merge1D: ramp_agents=(low, high) with 0 ≤ low ≤ high ≤ agents={agents}, got {ramp_agents}")
        if dt <= 0 or threshold <= 0 or merge_end <= 0 or reward_scale <= 0 or not 0 <= v_min < v_max:
            raise ConfigError("Merge1D: dt, threshold, merge_end and reward_scale must be positive and "
                              f"0 ≤ v_min < v_max, got v_min={v_min}, v_max={v_max}")
        if not v_min <= agent_speed[0] <= agent_speed[1] <= v_max:
            raise ConfigError(f"Merge1D: agent_speed={agent_speed} must lie in [v_min, v_max] = [{v_min}, {v_max}]")
        self.n, self.humans, self.safety, self.share_intents = agents, humans, safety, share_intents
        self.steps, self.dt, self.horizon, self.observed = steps, dt, horizon, observed
        self.merge_end, self.threshold, self.reward_scale = merge_end, threshold, reward_scale
        self.v_min, self.v_max = v_min, v_max
        self.ramp_agents, self.main_gap = (lo, hi), main_gap
        self.agent_speed, self.human_speed, self.human_desired = agent_speed, human_speed, human_desired
        self.accel = torch.tensor([*accelerations, 0.0], dtype=torch.float64)        # per action; MERGE keeps v
        self.points = torch.linspace(0, horizon - 1, intent_points + 1).round().long()[1:]
        self.merge = torch.arange(4) == MERGE
        total = agents + humans
        self.others = torch.arange(total).repeat(agents, 1)[~torch.eye(agents, total, dtype=torch.bool)].view(agents, -1)
        per_vehicle = 4 + (intent_points if share_intents else 0)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (agents, 3 + self.observed * per_vehicle), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([4] * agents)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng, n, total = self.np_random, self.n, self.n + self.humans
        ramp = rng.permutation(n)[: rng.integers(self.ramp_agents[0], self.ramp_agents[1] + 1)]
        self.lane = np.full(total, MAIN)
        self.lane[ramp] = RAMP
        self.x = np.zeros(total)
        main = rng.permutation(np.flatnonzero(self.lane == MAIN))
        self.x[main] = _queue(rng, len(main), self.main_gap)
        self.x[ramp] = _queue(rng, len(ramp), (15.0, 30.0))
        self.v = np.concatenate([rng.uniform(*self.agent_speed, n), rng.uniform(*self.human_speed, self.humans)])
        self.desired = rng.uniform(*self.human_desired, self.humans)
        self.last_action = np.full(n, IDLE)
        self.started_on_ramp = self.lane[:n] == RAMP
        self.t, self.speed_sum, self.shielded = 0, 0.0, 0
        self._refresh()
        return self._observation(), {}

    def step(self, action):
        planned = np.asarray(action).reshape(-1)
        if planned.shape != (self.n,) or not np.all((planned >= 0) & (planned < 4)):
            raise ValueError(f"Merge1D: expected {self.n} actions in 0..3, got {planned.tolist()}")
        planned = planned.astype(np.int64)
        on_ramp = self.lane[: self.n] == RAMP
        planned = np.where((planned == MERGE) & ~on_ramp, IDLE, planned)
        agent_x, agent_v, human_x, human_v = self.intents
        executed = self._shield(planned, agent_x, human_x) if self.safety else planned
        self.shielded += int((executed != planned).sum())
        rows = torch.arange(self.n)
        self.lane[: self.n][executed == MERGE] = MAIN
        self.x = np.concatenate([agent_x[rows, executed, 0].numpy(), human_x[:, 0].numpy()])
        self.v = np.concatenate([agent_v[rows, executed, 0].numpy(), human_v[:, 0].numpy()])
        self.last_action = executed
        self.t += 1
        self._refresh()
        crashed = self._crashed()
        speed = torch.from_numpy(self.v[: self.n])
        rewards = agent_rewards(torch.from_numpy(crashed[: self.n]), speed, torch.from_numpy(self.headway[: self.n]),
                                torch.from_numpy(self.lane[: self.n] == RAMP), torch.from_numpy(self.x[: self.n]),
                                self.merge_end, self.merge_end)
        self.speed_sum += float(speed.mean())
        terminated, truncated = bool(crashed.any()), self.t >= self.steps
        info = {}
        if terminated or truncated:
            ramp_agents = max(int(self.started_on_ramp.sum()), 1)
            info = {"collision": float(terminated), "speed": self.speed_sum / self.t,
                    "merged": float((self.started_on_ramp & (self.lane[: self.n] == MAIN)).sum()) / ramp_agents,
                    "shielded": self.shielded / (self.t * self.n)}
        return self._observation(), float(rewards.mean()) / self.reward_scale, terminated, truncated, info

    # ------------------------------------------------------------------ safety module
    def _shield(self, planned: np.ndarray, agent_x: torch.Tensor, human_x: torch.Tensor) -> np.ndarray:
        """The executed actions. Agents are checked in increasing priority against the others' current intents
        (the planned ones until a replacement changes them); after each replacement every agent not yet
        replaced is checked again in the same order (an earlier check may have relied on the intent that just
        changed), until no predicted collision is left that a first replacement could address."""
        n, executed = self.n, planned.copy()
        paths = torch.cat([agent_x[torch.arange(n), torch.from_numpy(planned)], human_x])    # [V, H]
        lane, x = torch.from_numpy(self.lane), torch.from_numpy(self.x)
        on_ramp = (lane[:n] == RAMP)[:, None]
        lane_change = self.merge & on_ramp                                                 # [n, 4]
        target = torch.where(lane_change, MAIN, lane[:n, None])
        barrier = torch.where(target == RAMP, self.merge_end + self.threshold, math.inf).to(torch.float64)
        available = ~self.merge | on_ramp
        priority = merge_priority(on_ramp[:, 0], self.merge_end - x[:n], torch.from_numpy(self.headway[:n]),
                                  torch.from_numpy(self.v[:n]), self.merge_end,
                                  tie_break=torch.from_numpy(self.np_random.uniform(0, 1e-3, n)))
        order, others, replaced = priority.argsort().tolist(), self.others, np.zeros(n, bool)
        while not replaced.all():
            rooms = safety_rooms(agent_x, x[:n], lane_change, target, barrier, paths[others], x[others], lane[others])
            pending = [i for i in order if not replaced[i]]
            choice = {i: shield_action(int(planned[i]), rooms[i], available[i], self.threshold) for i in pending}
            first = next((i for i in pending if choice[i] != planned[i]), None)
            if first is None:
                break
            executed[first], replaced[first] = choice[first], True
            paths[first] = agent_x[first, choice[first]]
        return executed

    # ------------------------------------------------------------------ world
    def _refresh(self) -> None:
        """What the current state implies: each vehicle's headway (centre distance to the nearest vehicle ahead
        in its lane, ``NO_LEADER`` if none) and leader (−1), the humans' accelerations, and the intents: every
        agent's path under each of its 4 actions and every human's under its current acceleration."""
        dx = self.x[None, :] - self.x[:, None]
        ahead = (self.lane[None, :] == self.lane[:, None]) & (dx > 0)
        dx = np.where(ahead, dx, np.inf)
        leader = dx.argmin(1)
        gap = dx[np.arange(len(dx)), leader]
        self.headway = np.minimum(gap, NO_LEADER)
        self.leader = np.where(np.isfinite(gap), leader, -1)
        self.human_acc = self._idm()
        x, v = torch.from_numpy(self.x), torch.from_numpy(self.v)
        self.intents = (*intent_paths(x[: self.n, None], v[: self.n, None], self.accel, self.dt, self.horizon,
                                      self.v_min, self.v_max),                          # [n, 4, H] each
                        *intent_paths(x[self.n:], v[self.n:], torch.from_numpy(self.human_acc), self.dt,
                                      self.horizon, 0.0, self.v_max))                   # [humans, H] each

    def _idm(self, a_max: float = 2.0, comfort: float = 3.0, brake: float = 6.0, time_gap: float = 1.2,
             jam: float = 2.0) -> np.ndarray:
        """The humans' accelerations: the Intelligent Driver Model ``a·[1 − (v/v₀)⁴ − (s*/s)²]``,
        ``s* = s₀ + v·T + v·Δv/(2√(a·b))`` toward the vehicle ahead (net gap s), clipped to [−brake, a_max]."""
        h = slice(self.n, None)
        leader, has = self.leader[h], self.leader[h] >= 0
        v, s = self.v[h], np.maximum(self.headway[h] - self.threshold, 1e-3)
        dv = np.where(has, v - self.v[leader], 0.0)
        s_star = jam + v * time_gap + v * dv / (2 * math.sqrt(a_max * comfort))
        interaction = np.where(has, (np.maximum(s_star, 0.0) / s) ** 2, 0.0)
        return np.clip(a_max * (1 - (v / self.desired) ** 4 - interaction), -brake, a_max)

    def _crashed(self) -> np.ndarray:
        """``[V]`` bool: closer than ``threshold`` to a vehicle of the same lane, or past the end of the ramp."""
        close = (np.abs(self.x[None, :] - self.x[:, None]) < self.threshold) & (self.lane[None, :] == self.lane[:, None])
        np.fill_diagonal(close, False)
        return close.any(1) | ((self.lane == RAMP) & (self.x > self.merge_end))

    def _observation(self) -> np.ndarray:
        n, x, v = self.n, self.x, self.v
        on_ramp = (self.lane == RAMP).astype(np.float64)
        ego = np.stack([on_ramp[:n], on_ramp[:n] * (self.merge_end - x[:n]) / SCALE_X, v[:n] / self.v_max], 1)
        dx = x[None, :] - x[:n, None]                                                   # [n, V]
        k = min(self.observed, len(x) - 1)
        order = np.argsort(np.where(np.eye(n, len(x), dtype=bool), np.inf, np.abs(dx)), 1, kind="stable")[:, :k]
        rows = np.arange(n)[:, None]
        others = np.zeros((n, self.observed, 4 + (len(self.points) if self.share_intents else 0)))  # absent: 0
        others[:, :k, 0] = 1.0
        others[:, :k, 1] = on_ramp[order]
        others[:, :k, 2] = dx[rows, order] / SCALE_X
        others[:, :k, 3] = (v[order] - v[:n, None]) / self.v_max
        if self.share_intents:
            agent_x, _, human_x, _ = self.intents
            future = torch.cat([agent_x[torch.arange(n), torch.from_numpy(self.last_action)], human_x])
            others[:, :k, 4:] = (future[:, self.points].numpy()[order] - x[:n, None, None]) / SCALE_X
        others = others.reshape(n, -1)
        return np.concatenate([ego, others], 1).astype(np.float32)
