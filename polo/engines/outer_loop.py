"""The base of engines whose outer loop changes what surrounds the policy: ``multi_turn`` episodes, each played
under a *setting* (INSPO's instruction, Self-HPO's harness) that changes the context the policy reads and
possibly the environment's knobs.

Each root episode of a rollout gets a setting (``assign``), recorded per row in ``extras[row_key]`` (the
setting's id) and in every turn record's ``meta``; branches inherit their parent's. ``before_rollout`` runs
at the start of every rollout (with the policy and the trainer's sampling generator: an outer step that must
roll out, like verifying candidates, happens there), ``after_update`` counts the completed updates. Held-out
evaluation plays each example greedily under ``eval_settings``. ``play_settings`` is the shared evaluation of
candidates: every setting on every seed, ``G`` sampled episodes each, mean return (or success) per (setting, seed).
Everything the loop keeps is checkpointed (``state_dict``: plain data), so a resumed run continues bit for bit.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import PrivateAttr
from torch import Tensor

from polo.engines.base import Rollouts
from polo.engines.episodes import Episode
from polo.engines.multi_turn import MultiTurn
from polo.tasks.base import Example


class OuterLoopEngine(MultiTurn):
    """``multi_turn`` with a per-episode setting; subclasses define the settings and the loop around them."""

    row_key: ClassVar[str] = ""
    """The ``extras`` name (and turn-record ``meta`` key) holding each row's setting id."""

    _updates: int = PrivateAttr(0)
    _pending: list | None = PrivateAttr(None)
    _setting_of: dict[int, Any] = PrivateAttr(default_factory=dict)

    # ------------------------------------------------------------- what a subclass defines
    def assign(self, n_examples: int, G: int, generator: torch.Generator) -> list:
        """The setting of each of the ``n_examples × G`` root episodes of a rollout (group-major)."""
        raise NotImplementedError

    def eval_settings(self, n: int) -> list:
        """The settings of ``n`` held-out greedy episodes (drawing no training randomness)."""
        raise NotImplementedError

    def setting_id(self, setting) -> int:
        raise NotImplementedError

    def apply(self, setting, episode: Episode, chat: bool) -> str | Example:
        """The context the policy reads under ``setting`` (``plain_context``: the task's rendering)."""
        raise NotImplementedError

    def plain_context(self, episode: Episode, chat: bool) -> str | Example:
        return super().context(episode, chat)

    def make_env(self, setting):
        """The environment of an episode under ``setting`` (default: the task's)."""
        return self.settings.task.make_env()

    def before_rollout(self, policy, generator: torch.Generator) -> None:
        """The outer step that needs the policy (called first in every rollout)."""

    def loop_state(self) -> dict[str, Any]:
        return {}

    def load_loop_state(self, state: dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------- the engine
    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        self.before_rollout(policy, generator)
        G = samples_per_prompt or self.settings.samples_per_prompt
        self._pending = self.assign(len(examples), G, generator)
        got = super().rollout(policy, examples, prompt_index, generator, samples_per_prompt=samples_per_prompt,
                              greedy=greedy)
        ids = [self.setting_id(self._setting(r.traj, r.parent)) for r in got.turns]
        for record, sid in zip(got.turns, ids):
            record.meta[self.row_key] = sid
        got.batch.extras[self.row_key] = torch.tensor(ids, dtype=torch.long)
        return got

    def evaluate(self, policy, examples: list[Example]) -> float:
        self._pending = self.eval_settings(len(examples))
        return super().evaluate(policy, examples)

    def start(self, seeds: list[int]) -> list[Episode]:
        """Root episodes, each under its pending setting (set by ``rollout``/``evaluate``/``play_settings``)."""
        settings, self._pending = self._pending, None
        if settings is None or len(settings) != len(seeds):
            raise RuntimeError(f"engine {self.registry_name}: {len(seeds)} episodes started without their settings")
        self._setting_of = dict(enumerate(settings))
        return [Episode.start(self.make_env(s), seed, i) for i, (seed, s) in enumerate(zip(seeds, settings))]

    def _setting(self, traj: int, parent: int):
        """A trajectory's setting; a branch (not started here) has its parent's, remembered for its own branches."""
        if traj not in self._setting_of:
            if parent not in self._setting_of:
                raise RuntimeError(f"engine {self.registry_name}: trajectory {traj} (parent {parent}) has no setting")
            self._setting_of[traj] = self._setting_of[parent]
        return self._setting_of[traj]

    def context(self, episode: Episode, chat: bool) -> str | Example:
        setting = self._setting(episode.traj, episode.parent)
        return self.apply(setting, episode, chat)

    def play_settings(self, policy, settings: list, seeds: list[int], G: int, generator: torch.Generator | None,
                      greedy: bool = False, success: bool = False) -> Tensor:
        """``[C, n]``: the mean return (``success``: success rate) of ``G`` episodes of each setting on each seed,
        all played in one batch."""
        if not settings or not seeds:
            return torch.zeros(len(settings), len(seeds))
        self._pending = [s for s in settings for _ in seeds for _ in range(G)]
        episodes = self.start([seed for _ in settings for seed in seeds for _ in range(G)])
        self.play(policy, episodes, generator, greedy)
        returns = torch.tensor([float(ep.success) if success else ep.episode_return for ep in episodes],
                               dtype=torch.float64)
        return returns.view(len(settings), len(seeds), G).mean(-1)

    def after_update(self, batch, context) -> dict[str, float]:
        self._updates += 1
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"updates": self._updates, **self.loop_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._updates = int(state["updates"])
        self.load_loop_state(state)
