"""AgentGraph: choose the communication graph of a multi-agent system per query (Graph-GRPO's demo).

N agents in a fixed order; the candidate edges are the C = N(N−1)/2 pairs i < j, so every subset is a DAG and
the action is MultiBinary(C). A query has a kind k (one of ``kinds``) and a difficulty z ∈ [−1, 1]; the
observation is ``[one-hot(k), z]``. A graph x succeeds with probability

    p(x | k, z) = σ(base + difficulty·z + Σ_c W[k, c]·x_c)

where, for each kind, ``helpful`` edges have W ∈ [1, 2], ``harmful`` ones W ∈ [−2.5, −1.5] and the rest 0, all
drawn from ``default_rng(layout_seed)``. The best graph of a query takes exactly its kind's helpful edges
(``best_success_prob``). An episode is ``attempts`` independent tries of graphs at the same query (a group of
samples for a critic-free group baseline); each try's reward is its success (0/1). Every step's info carries
``success`` (the fraction of the episode's tries so far that succeeded), ``success_prob`` (their mean exact
success probability) and ``best_success_prob``.
"""
from __future__ import annotations

import numpy as np

from polo.control.envs.registration import gymnasium

gym = gymnasium()


def edge_weights(agents: int, kinds: int, helpful: int, harmful: int, layout_seed: int) -> np.ndarray:
    """``W`` ``[kinds, C]``: per kind, ``helpful`` random edges with weights in [1, 2], ``harmful`` ones in
    [−2.5, −1.5], the rest 0."""
    c = agents * (agents - 1) // 2
    if helpful + harmful > c:
        raise ValueError(f"helpful + harmful = {helpful + harmful} edges, but {agents} agents have only {c}")
    rng = np.random.default_rng(layout_seed)
    w = np.zeros((kinds, c))
    for k in range(kinds):
        order = rng.permutation(c)
        w[k, order[:helpful]] = rng.uniform(1.0, 2.0, helpful)
        w[k, order[helpful:helpful + harmful]] = -rng.uniform(1.5, 2.5, harmful)
    return w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class AgentGraph(gym.Env):
    """One query per episode, ``attempts`` graphs tried at it; reward 1 per successful try."""

    metadata = {"render_modes": []}

    def __init__(self, agents: int = 8, kinds: int = 4, helpful: int = 4, harmful: int = 4, attempts: int = 1,
                 base: float = -2.0, difficulty: float = 0.5, layout_seed: int = 0):
        if agents < 2 or kinds < 1 or attempts < 1:
            raise ValueError(f"AgentGraph needs agents ≥ 2, kinds ≥ 1 and attempts ≥ 1, got {agents}, {kinds}, "
                             f"{attempts}")
        self.pairs = [(i, j) for i in range(agents) for j in range(i + 1, agents)]
        self.weights = edge_weights(agents, kinds, helpful, harmful, layout_seed)
        self.kinds, self.attempts, self.base, self.difficulty = kinds, attempts, base, difficulty
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (kinds + 1,), np.float32)
        self.action_space = gym.spaces.MultiBinary(len(self.pairs))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._kind = int(self.np_random.integers(self.kinds))
        self._z = float(self.np_random.uniform(-1.0, 1.0))
        self._tries, self._successes, self._probs = 0, 0, 0.0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.kinds + 1, np.float32)
        obs[self._kind], obs[-1] = 1.0, self._z
        return obs

    def success_prob(self, x: np.ndarray) -> float:
        """Exact success probability of graph ``x`` at the current query."""
        return float(sigmoid(self.base + self.difficulty * self._z + self.weights[self._kind] @ x))

    def best_success_prob(self) -> float:
        return float(sigmoid(self.base + self.difficulty * self._z + np.clip(self.weights[self._kind], 0, None).sum()))

    def step(self, action):
        x = np.asarray(action)
        if x.shape != (len(self.pairs),) or not np.isin(x, (0, 1)).all():
            raise ValueError(f"AgentGraph expects a 0/1 vector over {len(self.pairs)} edges, got {x.tolist()}")
        p = self.success_prob(x.astype(np.float64))
        success = bool(self.np_random.random() < p)
        self._tries += 1
        self._successes += success
        self._probs += p
        info = {"success": self._successes / self._tries, "success_prob": self._probs / self._tries,
                "best_success_prob": self.best_success_prob()}
        return self._obs(), float(success), self._tries >= self.attempts, False, info
