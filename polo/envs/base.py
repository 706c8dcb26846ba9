"""The text-environment contract: ``reset(seed) -> observation``, ``step(action) -> StepResult``.

An environment is a pydantic component whose fields are its knobs; the episode's state lives in private
attributes. All randomness of an episode comes from one ``random.Random(seed)`` made in ``reset`` (no global
RNG), so the same seed and the same actions give the same transcript. Every ``info`` holds ``valid`` (the
action parsed), ``tool_error`` (a well-formed call that found nothing), ``anchor_obs`` (the observation the
action was taken in: the state text that GiGPO-style grouping hashes with ``obs_hash``) and the
environment's oracles. An episode ends when it is terminated (a terminal state) or truncated (the turn
limit reached first); stepping it again is an error. ``expert()`` is the scripted policy's action in the
current state and ``gold`` a training-only oracle (the answer). An environment that runs programs
(``runs_programs``) receives its code sandbox, a ``ProgramTester``, from whoever builds it: polo.envs imports
nothing from polo.tasks, where the sandbox lives (polo.tasks.environment passes it).
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

from pydantic import PrivateAttr

from polo.core.registry import Component
from polo.envs.render import render_context


ProgramTester = Callable[[str, Sequence[tuple[tuple[Any, ...], Any]], str], list[bool]]
"""A code sandbox as an environment receives it: ``tester(source, tests, function)`` runs ``source`` isolated,
calls ``function(*args)`` for each test ``(args, expected)`` and returns, per test, whether it gave ``expected``."""


def obs_hash(anchor_obs: str) -> str:
    """The first 16 hex digits of the SHA-1 of ``anchor_obs`` stripped, with whitespace runs made one space."""
    return hashlib.sha1(" ".join(anchor_obs.split()).encode()).hexdigest()[:16]


class StepResult(NamedTuple):
    """What ``step`` returns, unpacked as ``obs, reward, terminated, truncated, info``."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Transition(NamedTuple):
    """One step's outcome as an environment computes it; ``Environment.step`` adds the bookkeeping."""

    observation: str
    reward: float
    terminated: bool = False
    success: bool = False
    valid: bool = True
    tool_error: bool = False
    oracles: dict[str, Any] = {}
    truncated: bool = False
    """The environment's own truncation (the turn limit is applied by ``step``)."""


class Environment(Component):
    """Base class of text environments; subclasses are registered with ``@register_environment(name)``.

    A subclass implements ``_generate(rng)`` (draw the episode, return the first observation),
    ``_transition(action)``, ``expert()``, ``gold``, ``valid_actions()`` and ``turn_limit``.
    """

    registry_name: ClassVar[str] = ""
    action_stop: ClassVar[str] = ";"
    """The character that ends a decoded action."""
    max_action_chars: ClassVar[int] = 12
    """The most characters of a decoded action."""
    probe_prefix: ClassVar[str | None] = None
    """Text after a context that asks for the final answer (``"a:"``): the answer probe is it + ``gold``."""
    placeholder: ClassVar[str] = "none"
    """The uninformative observation that stands in for a real one in InfoPO's counterfactual context."""
    runs_programs: ClassVar[bool] = False
    """Whether the environment runs programs: ``make(config, sandbox=tester)`` then builds it with ``sandbox``."""

    _prompt: str | None = PrivateAttr(None)
    _obs: str = PrivateAttr("")
    _t: int = PrivateAttr(0)
    _done: bool = PrivateAttr(False)
    _success: bool = PrivateAttr(False)

    @property
    def name(self) -> str:
        """The registered name (the class name for an unregistered environment)."""
        return type(self).registry_name or type(self).__name__

    @property
    def prompt(self) -> str:
        """The episode's first observation."""
        self._check_started()
        return self._prompt

    @property
    def done(self) -> bool:
        """Whether the episode has terminated or been truncated."""
        return self._done

    @property
    def success(self) -> bool:
        """Whether the episode reached its goal (reached the cell, answered right, guessed the number)."""
        return self._success

    @property
    def turn_limit(self) -> int:
        """The episode is truncated once this many steps are taken."""
        raise NotImplementedError

    @property
    def gold(self) -> Any:
        """Training-only oracle of the episode (the answer)."""
        raise NotImplementedError(f"{self.name} has no gold answer")

    def reset(self, seed: int) -> str:
        """Start the episode of ``seed``; returns its first observation."""
        return self._begin(self._generate(random.Random(seed)))

    def _begin(self, observation: str) -> str:
        """Record ``observation`` as the new episode's first and clear the step count and flags."""
        self._prompt = self._obs = observation
        self._t, self._done, self._success = 0, False, False
        return observation

    def step(self, action: str) -> StepResult:
        """Apply ``action``; truncated when the turn limit is reached without termination."""
        self._check_open()
        anchor = self._obs
        self._t += 1
        out = self._transition(action)
        truncated = not out.terminated and (out.truncated or self._t >= self.turn_limit)
        self._obs, self._done, self._success = out.observation, out.terminated or truncated, out.success
        info = {"valid": out.valid, "tool_error": out.tool_error, "anchor_obs": anchor, **out.oracles}
        return StepResult(out.observation, float(out.reward) + 0.0, out.terminated, truncated, info)  # + 0.0: no -0.0

    def render(self, history: Sequence[tuple[str, str]], window: int = 4) -> str:
        """The policy's context for the current state (``render_context`` unless a variant says otherwise)."""
        return render_context(self.prompt, history, window)

    @property
    def plain_history(self) -> bool:
        """Whether ``render`` shows the prompt and past turns as they happened (``render_context``), so a chat
        template may lay them out as user, assistant and tool messages instead."""
        return True

    def expert(self) -> str:
        """The scripted expert's action in the current state."""
        raise NotImplementedError(f"{self.name} has no scripted expert")

    def observation_argument(self, action: str) -> int | None:
        """For an information-fetching tool call (an observation action): the characters before its argument;
        None for any other action."""
        return None

    def alternative(self, action: str) -> str | None:
        """The same step at the other tool granularity (a composite skill ↔ its first atomic call), when that
        is feasible now; None otherwise."""
        return None

    def valid_actions(self) -> list[str]:
        """Well-formed actions a random policy may take in the current state, in a fixed order."""
        raise NotImplementedError(f"{self.name} does not list its valid actions")

    def _generate(self, rng: random.Random) -> str:
        raise NotImplementedError

    def _transition(self, action: str) -> Transition:
        raise NotImplementedError

    def _check_started(self) -> None:
        if self._prompt is None:
            raise RuntimeError(f"{self.name}: no episode yet; call reset(seed) first")

    def _check_open(self) -> None:
        self._check_started()
        if self._done:
            raise RuntimeError(f"{self.name}: the episode ended after {self._t} steps; call reset(seed) to start "
                               "another")
