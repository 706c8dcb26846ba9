"""``TextGrid-v0``: reach the goal cell of a small walled grid by moving ``n``, ``s``, ``e`` or ``w``."""
from __future__ import annotations

import random
from collections import deque
from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr

from polo.envs.base import Environment, Transition
from polo.envs.registry import register_environment

Cell = tuple[int, int]
MOVES: dict[str, Cell] = {"n": (-1, 0), "s": (1, 0), "e": (0, 1), "w": (0, -1)}
"""The actions in the expert's order of preference, with their (row, column) offsets."""
MAX_ATTEMPTS = 100


@register_environment("TextGrid-v0")
class TextGrid(Environment):
    """Text gridworld: walk to the goal; +1 on arrival, with global or egocentric (aliasing) observations.

    Generation, per attempt (at most 100): walls are the cells, rows then columns, whose ``rng.random()`` is
    below ``wall_p``; then ``start`` and ``goal`` each draw ``randrange(H)`` then ``randrange(W)``. An attempt
    is rejected when start or goal is a wall, they coincide, are under 3 apart (Manhattan) or are not
    connected through 4-neighbours. Observation ``global``: ``"r{row}c{col} g:r{gr}c{gc}"``; ``local``: the 3×3
    window around the agent, rows joined by ``/`` (``#`` wall or outside, ``.`` free, ``g`` goal, ``@`` the
    agent), then ``" g:"`` and the compass to the goal (``n``/``s`` when the row differs, then ``e``/``w``
    when the column does; empty at the goal). A move into a wall or the border stays put (``bump``, still
    valid); any other action is invalid (no move, reward ``-invalid_penalty``). Entering the goal gives +1 and
    terminates; every other valid step gives ``-step_penalty``. Oracles: ``distance`` (BFS steps from the new
    position to the goal; the optimal value is ``gamma ** (distance - 1)``) and ``bump``. The expert takes the
    first of n, s, e, w that lowers the BFS distance; ``gold`` is the goal cell, ``optimal_length`` the
    distance from the start.
    """

    provenance = "RECONSTRUCTED"
    deterministic: ClassVar[bool] = True
    copyable: ClassVar[bool] = True

    H: int = Field(5, ge=3, le=20)
    """Rows of the grid."""
    W: int = Field(5, ge=3, le=20)
    """Columns of the grid."""
    wall_p: float = Field(0.2, ge=0.0, lt=1.0)
    """Probability that a cell is a wall."""
    max_steps: int = Field(12, ge=1)
    """Steps before the episode is truncated."""
    obs_mode: Literal["global", "local"] = "global"
    """``global``: both coordinates; ``local``: the 3×3 egocentric window and the compass to the goal."""
    invalid_penalty: float = Field(0.0, ge=0.0)
    """Subtracted for an action that is not n, s, e or w (0.1 mirrors GiGPO)."""
    step_penalty: float = Field(0.0, ge=0.0)
    """Subtracted for every valid step that does not reach the goal."""

    _walls: frozenset[Cell] = PrivateAttr(frozenset())
    _start: Cell = PrivateAttr((0, 0))
    _pos: Cell = PrivateAttr((0, 0))
    _goal: Cell = PrivateAttr((0, 0))
    _dist: dict[Cell, int] = PrivateAttr(default_factory=dict)

    @property
    def turn_limit(self) -> int:
        return self.max_steps

    @property
    def gold(self) -> str:
        """The goal cell, ``"r{row}c{col}"``."""
        self._check_started()
        return "r{}c{}".format(*self._goal)

    @property
    def optimal_length(self) -> int:
        """BFS steps from the start to the goal (the expert's episode length)."""
        self._check_started()
        return self._dist[self._start]

    def _generate(self, rng: random.Random) -> str:
        for _ in range(MAX_ATTEMPTS):
            walls = frozenset((r, c) for r in range(self.H) for c in range(self.W) if rng.random() < self.wall_p)
            start = (rng.randrange(self.H), rng.randrange(self.W))
            goal = (rng.randrange(self.H), rng.randrange(self.W))
            if start in walls or goal in walls or abs(start[0] - goal[0]) + abs(start[1] - goal[1]) < 3:
                continue
            dist = self._bfs(goal, walls)
            if start in dist:
                self._walls, self._goal, self._dist, self._start, self._pos = walls, goal, dist, start, start
                return self._observe()
        raise ValueError(f"TextGrid-v0: no solvable layout in {MAX_ATTEMPTS} attempts with H={self.H}, "
                         f"W={self.W}, wall_p={self.wall_p}; expected a lower wall_p")

    def _bfs(self, goal: Cell, walls: frozenset[Cell]) -> dict[Cell, int]:
        """Steps to ``goal`` from every cell connected to it."""
        dist, queue = {goal: 0}, deque([goal])
        while queue:
            cell = queue.popleft()
            for dr, dc in MOVES.values():
                nxt = (cell[0] + dr, cell[1] + dc)
                if nxt not in dist and self._free(nxt, walls):
                    dist[nxt] = dist[cell] + 1
                    queue.append(nxt)
        return dist

    def _free(self, cell: Cell, walls: frozenset[Cell]) -> bool:
        return 0 <= cell[0] < self.H and 0 <= cell[1] < self.W and cell not in walls

    def _moved(self, action: str) -> Cell:
        dr, dc = MOVES[action]
        nxt = (self._pos[0] + dr, self._pos[1] + dc)
        return nxt if self._free(nxt, self._walls) else self._pos

    def _observe(self) -> str:
        (r, c), (gr, gc) = self._pos, self._goal
        if self.obs_mode == "global":
            return f"r{r}c{c} g:r{gr}c{gc}"
        window = "/".join("".join(self._symbol((r + dr, c + dc)) for dc in (-1, 0, 1)) for dr in (-1, 0, 1))
        compass = ("n" if gr < r else "s" if gr > r else "") + ("w" if gc < c else "e" if gc > c else "")
        return f"{window} g:{compass}"

    def _symbol(self, cell: Cell) -> str:
        if cell == self._pos:
            return "@"
        if cell == self._goal:
            return "g"
        return "." if self._free(cell, self._walls) else "#"

    def _transition(self, action: str) -> Transition:
        if action not in MOVES:
            return Transition(self._observe(), -self.invalid_penalty, valid=False,
                              oracles={"bump": False, "distance": self._dist[self._pos]})
        nxt = self._moved(action)
        bump, self._pos = nxt == self._pos, nxt
        arrived = nxt == self._goal
        reward = 1.0 if arrived else -self.step_penalty
        return Transition(self._observe(), reward, terminated=arrived, success=arrived,
                          oracles={"bump": bump, "distance": self._dist[nxt]})

    def expert(self) -> str:
        self._check_open()
        return min(MOVES, key=lambda a: self._dist[self._moved(a)])

    def valid_actions(self) -> list[str]:
        return list(MOVES)
