"""The text-environment contract: ``reset(seed) -> observation``, ``step(action) -> StepResult``.

An environment is a pydantic component whose fields are its knobs; the episode's state lives in private
attributes. In polo's environments all randomness of an episode comes from one ``random.Random(seed)`` made in
``reset`` (no global RNG), so the same seed and the same actions give the same transcript: they declare themselves
``deterministic``, and ``copyable`` (``snapshot()`` deep-copies the private attributes, ``restore(state)`` puts them
back). Rollout trees restore a branch point's state with ``snapshot``/``restore``; only a deterministic environment
without them has the state re-created by replaying its actions. Every ``info`` holds ``valid`` (the
action parsed), ``tool_error`` (a well-formed call that found nothing), ``anchor_obs`` (the observation the
action was taken in: the state text that GiGPO-style grouping hashes with ``obs_hash``) and the
environment's oracles. An episode ends when it is terminated (a terminal state) or truncated (the turn
limit reached first); stepping it again is an error. Optional, for the methods that read them: ``gold``, a
training-only oracle (the answer; None when the environment has none), ``expert()``, the scripted policy's action in
the current state, ``valid_actions()``, for random exploration, and the oracles in ``info``; an environment
without one has ``gold`` None, an ``expert()`` or ``valid_actions()`` that raises NotImplementedError, or no such
``info`` key. An environment that runs programs
(``runs_programs``) receives its code sandbox, a ``ProgramTester``, from whoever builds it: polo.envs imports
nothing from polo.tasks, where the sandbox lives (polo.tasks.environment passes it).
"""
from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

from pydantic import PrivateAttr

from polo.core.registry import Component
from polo.envs.render import render_context
from polo.envs.tools import ToolSpec, call_function


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
    ``_transition(action)`` and ``turn_limit``; optionally ``gold``, ``expert()`` and ``valid_actions()``.
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
    deterministic: ClassVar[bool] = False
    """Whether the same seed and the same actions always lead to the same state (all randomness from ``reset``'s
    ``random.Random(seed)``, no side effects): a state may then be re-created by replaying its actions."""
    copyable: ClassVar[bool] = False
    """Whether a deep copy of the private attributes is a faithful snapshot of the episode's state (plain Python
    data, no handle to a process, file or server): ``snapshot``/``restore`` then copy them."""

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
        """Training-only oracle of the episode (the answer); None: the environment has no gold answer."""
        return None

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

    @property
    def can_snapshot(self) -> bool:
        """Whether ``snapshot``/``restore`` work: the environment is ``copyable`` or overrides them."""
        return self.copyable or type(self).snapshot is not Environment.snapshot

    def snapshot(self) -> Any:
        """The episode's state now, for ``restore`` (a deep copy of the private attributes when ``copyable``).
        An override returns whatever its ``restore`` reads; one state may be restored many times, in fresh
        environments built like this one, and none of them may change it."""
        if not self.copyable:
            raise NotImplementedError(f"{self.name} offers no snapshot(): implement snapshot()/restore(), or set "
                                      "copyable = True when a deep copy of its private attributes is its state")
        return copy.deepcopy(self.__pydantic_private__)

    def restore(self, state: Any) -> None:
        """Put the episode in ``state`` (from ``snapshot``): it continues from there, nothing replayed."""
        if not self.copyable:
            raise NotImplementedError(f"{self.name} offers no restore(): implement snapshot()/restore(), or set "
                                      "copyable = True when a deep copy of its private attributes is its state")
        self.__pydantic_private__.update(copy.deepcopy(state))

    def render(self, history: Sequence[tuple[str, str]], window: int = 4) -> str:
        """The policy's context for the current state (``render_context`` unless a variant says otherwise)."""
        return render_context(self.prompt, history, window)

    @property
    def plain_history(self) -> bool:
        """Whether ``render`` shows the prompt and past turns as they happened (``render_context``), so a chat
        template may lay them out as user, assistant and tool messages instead."""
        return True

    def tools(self) -> list[ToolSpec]:
        """The actions as tools for a chat checkpoint's function calling (``polo.envs.tools``): documented functions
        returning the action text a call stands for, or JSON schemas (then override ``tool_action``); none by
        default, and then a chat checkpoint writes action text as the built-in model does."""
        return []

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The action text of a call of tool ``name`` with ``arguments``; None when no tool takes that call (by
        default: the function tool of that name, called with them)."""
        return call_function(self.tools(), name, arguments)

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
