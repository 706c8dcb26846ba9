"""SyntheticDRAM: a numpy stand-in for ArchGym's DRAM memory-controller environment (MARL-DSE's case study).

Ten knobs with the cardinalities of the DRAM controller (page policy 4, scheduler 3, scheduler buffer 3, request
buffer size 8, response queue 2, refresh policy 2, refresh max postponed 4, refresh max pulled-in 4, arbiter 3,
max active transactions 8: 442,368 designs). A design x has

    latency(x) = 1 + Σ_i w_i·tab_i[x_i] + inter[x_3, x_9]
    power(x)   = 1 + Σ_i v_i·ptab_i[x_i],      energy = power · latency

with weights, tables and the request-buffer × max-active-transactions interaction drawn from
``default_rng(table_seed)``. Targets sit 10 % below the best design (``L* = 0.9·min latency``, the same for
power), so the reward (polo.control.math.marl_dse.dse_reward) is bounded by 9 and smooth. Every episode is one
design (a contextual bandit, ArchGym's ``max_steps = 1``); the observation is (energy, power, latency) of the
copy's last design (zeros before the first). The final info carries the metrics and ``latency_ratio`` /
``power_ratio``: the design's value over the exact optimum, found by brute force over every design.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

import numpy as np
import torch

from polo.control.envs.registration import gymnasium
from polo.control.math.marl_dse import bin_index, dse_reward

DRAM_KNOBS: tuple[tuple[str, int], ...] = (
    ("page_policy", 4), ("scheduler", 3), ("scheduler_buffer", 3), ("request_buffer_size", 8),
    ("response_queue", 2), ("refresh_policy", 2), ("refresh_max_postponed", 4), ("refresh_max_pulled_in", 4),
    ("arbiter", 3), ("max_active_transactions", 8))
SIZES: list[int] = [n for _, n in DRAM_KNOBS]


class DramModel:
    """The latency and power tables of one ``table_seed``."""

    def __init__(self, table_seed: int = 42):
        rng = np.random.default_rng(table_seed)
        self.w = rng.uniform(0.05, 0.5, len(SIZES))
        self.tab = [rng.uniform(0.0, 1.0, n) for n in SIZES]
        self.inter = rng.uniform(0.0, 0.5, (SIZES[3], SIZES[9]))
        self.v = rng.uniform(0.05, 0.5, len(SIZES))
        self.ptab = [rng.uniform(0.0, 1.0, n) for n in SIZES]

    def latency(self, x: np.ndarray) -> np.ndarray:
        """Latency of designs ``x`` (int ``[..., 10]``)."""
        main = sum(self.w[i] * self.tab[i][x[..., i]] for i in range(len(SIZES)))
        return 1.0 + main + self.inter[x[..., 3], x[..., 9]]

    def power(self, x: np.ndarray) -> np.ndarray:
        return 1.0 + sum(self.v[i] * self.ptab[i][x[..., i]] for i in range(len(SIZES)))

    def all_latencies(self) -> np.ndarray:
        """Latency of every design, shape ``SIZES`` (broadcast sums, no loop over designs)."""
        return self._grid(self.w, self.tab) + self.inter.reshape(_axis_shape(3, 9))

    def all_powers(self) -> np.ndarray:
        return self._grid(self.v, self.ptab)

    @staticmethod
    def _grid(weights: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
        out = np.ones(SIZES)
        for i, table in enumerate(tables):
            out = out + weights[i] * table.reshape(_axis_shape(i))
        return out


def _axis_shape(*axes: int) -> list[int]:
    """A broadcast shape with the knobs' sizes on ``axes`` and 1 elsewhere."""
    return [n if i in axes else 1 for i, n in enumerate(SIZES)]


@lru_cache(maxsize=8)
def dram_optimum(table_seed: int = 42) -> dict[str, Any]:
    """Brute force over all designs: the minimum latency and power and the designs that reach them."""
    model = DramModel(table_seed)
    lat, pw = model.all_latencies(), model.all_powers()
    design = lambda grid: tuple(int(i) for i in np.unravel_index(int(grid.argmin()), grid.shape))  # noqa: E731
    return {"latency": float(lat.min()), "latency_design": design(lat), "power": float(pw.min()),
            "power_design": design(pw)}


gym = gymnasium()


class SyntheticDRAM(gym.Env):
    """One design per episode; action MultiDiscrete(SIZES) (``action_type: continuous``: Box(−1, 1, (10,)) mapped
    to knob values by equal bins, ArchGym's ``macme_continuous``)."""

    metadata = {"render_modes": []}

    def __init__(self, reward_formulation: Literal["latency", "power", "both"] = "latency", reward_cap: float = 1000.0,
                 target_fraction: float = 0.9, table_seed: int = 42,
                 action_type: Literal["discrete", "continuous"] = "discrete"):
        if reward_formulation not in ("latency", "power", "both"):
            raise ValueError(f"reward_formulation {reward_formulation!r}: expected latency, power or both")
        if action_type not in ("discrete", "continuous"):
            raise ValueError(f"action_type {action_type!r}: expected discrete or continuous")
        if not 0 < target_fraction < 1:
            raise ValueError(f"target_fraction must lie in (0, 1), got {target_fraction}")
        self.model = DramModel(table_seed)
        best = dram_optimum(table_seed)
        self.best_latency, self.best_power = best["latency"], best["power"]
        self.target_latency, self.target_power = target_fraction * self.best_latency, target_fraction * self.best_power
        self.formulation, self.cap, self.action_type = reward_formulation, reward_cap, action_type
        self.observation_space = gym.spaces.Box(0.0, np.inf, (3,), np.float32)
        self.action_space = (gym.spaces.MultiDiscrete(SIZES) if action_type == "discrete"
                             else gym.spaces.Box(-1.0, 1.0, (len(SIZES),), np.float32))
        self._last = np.zeros(3, np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self._last.copy(), {}

    def design(self, action) -> np.ndarray:
        """The knob values ``[10]`` an action selects."""
        a = np.asarray(action)
        if a.shape != (len(SIZES),):
            raise ValueError(f"SyntheticDRAM expects an action of shape ({len(SIZES)},), got {a.shape}")
        if self.action_type == "continuous":
            return bin_index(torch.as_tensor(a, dtype=torch.float64), SIZES).numpy()
        x = a.astype(np.int64)
        if (x < 0).any() or (x >= np.array(SIZES)).any():
            raise ValueError(f"SyntheticDRAM action {x.tolist()} out of range: knob i takes 0..n_i − 1, n = {SIZES}")
        return x

    def step(self, action):
        x = self.design(action)
        latency, power = float(self.model.latency(x)), float(self.model.power(x))
        reward = float(dse_reward(self.formulation, torch.tensor(latency, dtype=torch.float64),
                                  torch.tensor(power, dtype=torch.float64), self.target_latency, self.target_power,
                                  self.cap))
        self._last = np.array([power * latency, power, latency], np.float32)
        info = {"latency": latency, "power": power, "energy": power * latency,
                "latency_ratio": latency / self.best_latency, "power_ratio": power / self.best_power}
        return self._last.copy(), reward, True, False, info
