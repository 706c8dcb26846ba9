"""Any gymnasium-style environment with text observations and actions, as a polo ``Environment``.

The wrapped object needs only ``reset(seed=...) -> (observation, info)`` and ``step(action) -> (observation,
reward, terminated, truncated, info)`` (gymnasium itself is not imported). Its ``info`` is passed through;
``valid`` defaults to true and ``tool_error`` to false when it does not set them, ``anchor_obs`` is the
observation the action was taken in, and the episode succeeds when it terminates with ``info["success"]``
(default: a positive reward). ``max_turns`` truncates an episode the wrapped environment does not end.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from polo.envs.base import Environment, Transition


class GymTextEnvironment(Environment):
    """A gymnasium-style text environment behind the polo contract (no scripted expert, no gold)."""

    env: Any
    """The wrapped object with gymnasium's ``reset`` and ``step``."""
    max_turns: int = Field(100, ge=1)
    """Steps before the episode is truncated."""

    @property
    def turn_limit(self) -> int:
        return self.max_turns

    def reset(self, seed: int) -> str:
        observation, _ = self.env.reset(seed=seed)
        return self._begin(self._text(observation))

    def _transition(self, action: str) -> Transition:
        observation, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        valid, tool_error = bool(info.pop("valid", True)), bool(info.pop("tool_error", False))
        success = bool(terminated) and bool(info.get("success", reward > 0))
        return Transition(self._text(observation), float(reward), bool(terminated), success, valid, tool_error,
                          info, bool(truncated))

    def _text(self, observation: Any) -> str:
        if not isinstance(observation, str):
            raise TypeError(f"{type(self.env).__name__}: expected a text observation, got {type(observation).__name__}")
        return observation
