"""The contract of a control method (one registered training loop) and its registry."""
from __future__ import annotations

from typing import Any, Callable, ClassVar

from pydantic import Field
from torch import Tensor

from polo.core.registry import Component, Registry

CONTROL_METHODS: Registry = Registry("control method", ("polo.control.methods",), default="ppo")


class ControlMethod(Component):
    """One training loop, configured by its fields (the recipe's keys besides kind, name, seed, ...).

    ``setup`` builds everything (environments, networks, optimizers, generators seeded from ``seed``); each
    ``iterate`` is one iteration (a rollout and an update) returning its metrics row; ``evaluate`` returns
    ``eval/*`` metrics, ``headline`` naming the one progress bars and arenas show. ``weights`` / ``training_state``
    hold everything a resume needs (tensors as weights, the rest — optimizer, generators, environments — as
    state) so that a killed run continues bit for bit."""

    headline: ClassVar[str] = "eval/return"
    panels: ClassVar[tuple[tuple[str, str], ...]] = (
        ("eval/return", "evaluation return (deterministic)"), ("train/episode_return", "training episode return"),
        ("policy/entropy", "entropy"), ("policy/approx_kl", "approx. KL to behaviour policy"),
        ("loss/value", "value loss"), ("policy/clip_frac", "clipped fraction"))
    """The six curves of the run's curves.png (metric key, title)."""

    iterations: int = Field(100, ge=1)
    """Training iterations."""
    eval_every: int = Field(10, ge=1)
    """Evaluate every this many iterations (and after the last)."""
    checkpoint_every: int = Field(10, ge=1)
    """Write a checkpoint every this many iterations (and after the last)."""

    def derived_fields(self) -> set[str]:
        """Fields computed from others (left out of the run's config.yaml, so that extending the field they come
        from on ``--resume`` recomputes them)."""
        return set()

    def setup(self, seed: int, log: Callable[[str], Any]) -> None:
        raise NotImplementedError

    def iterate(self, iteration: int) -> dict[str, float]:
        """Iteration ``iteration`` (1-based)."""
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:
        raise NotImplementedError

    def weights(self) -> dict[str, dict[str, Tensor]]:
        raise NotImplementedError

    def load_weights(self, weights: dict[str, dict[str, Tensor]]) -> None:
        raise NotImplementedError

    def training_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_training_state(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
