"""Prompt stream: shuffled passes over the task's training pool, with resumable random state."""
from __future__ import annotations

from typing import Any

import torch

from polo.tasks.base import Example


class PromptStream:
    """Yields training examples in a seeded random order, epoch after epoch."""

    def __init__(self, pool: list[Example], seed: int):
        if not pool:
            raise ValueError("the task's training pool is empty")
        self.pool = pool
        self.generator = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(len(pool), generator=self.generator)
        self.cursor = 0

    def next(self, n: int) -> tuple[list[Example], list[int]]:
        """The next ``n`` examples and their indices in the pool."""
        out: list[int] = []
        while len(out) < n:
            if self.cursor == len(self.order):
                self.order = torch.randperm(len(self.pool), generator=self.generator)
                self.cursor = 0
            take = min(n - len(out), len(self.order) - self.cursor)
            out.extend(self.order[self.cursor : self.cursor + take].tolist())
            self.cursor += take
        return [self.pool[i] for i in out], out

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "order": self.order, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.order = state["order"]
        self.cursor = state["cursor"]
