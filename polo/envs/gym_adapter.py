"""Any gymnasium-style environment with text observations and actions, as a polo ``Environment``.

The wrapped object needs only ``reset(seed=...) -> (observation, info)`` and ``step(action) -> (observation,
reward, terminated, truncated, info)`` (gymnasium itself is not imported). Its ``info`` is passed through;
``valid`` defaults to true and ``tool_error`` to false when it does not set them, ``anchor_obs`` is the
observation the action was taken in, and the episode succeeds when its last ``info["success"]`` is true (without
that key: when it terminates with a positive reward). ``max_turns`` truncates an episode the wrapped environment
does not end.

A recipe names it ``{name: gym, entry_point: "my_env:MyEnv", kwargs: {...}, max_turns: 10}``: every environment
built calls ``MyEnv(**kwargs)`` (``polo.envs.entry_points``), so the recipe stays plain data (config.yaml, --resume).
What the wrapped object offers beyond ``reset``/``step`` is used: ``gold`` (an attribute), ``expert()``,
``valid_actions()``, else an ``action_space`` that is a list of actions or has ``sample()`` (seeded with the
episode's seed when it has ``seed()``), for the random exploration of a warm start on its own successes. A
non-text observation or a return of another shape is a one-line TypeError naming the object and the method.

Rollout trees restore states with ``snapshot()``/``restore()``: the wrapped object's own ``snapshot()``/``restore(state)``
(or ``get_state()``/``set_state(state)``) when it has them, else a deep copy of it when ``copy_state`` declares that
safe; an environment with neither can still be branched by replay in a subclass that sets ``deterministic = True``.
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from numbers import Real
from typing import Any

from pydantic import Field, model_validator

from polo.core.registry import ConfigError
from polo.envs.base import Environment, Transition
from polo.envs.entry_points import load_entry_point
from polo.envs.registry import register_environment


@register_environment("gym")
class GymTextEnvironment(Environment):
    """A gymnasium-style text environment (``reset(seed=)``/``step(action)``, text observations) behind the polo
    contract; its gold, expert and valid actions when it has them."""

    env: Any = None
    """The wrapped object with gymnasium's ``reset`` and ``step`` (built from ``entry_point`` in a recipe)."""
    entry_point: str | None = None
    """``"module:attr"`` (or ``"file.py:attr"``) of the class or function that builds the wrapped object."""
    kwargs: dict[str, Any] = {}
    """Keyword arguments of ``entry_point``."""
    max_turns: int = Field(100, ge=1)
    """Steps before the episode is truncated."""
    copy_state: bool = False
    """Whether a deep copy of the wrapped object is a faithful snapshot of its state (plain Python data, no
    process, file or server behind it); read only when it has no snapshot/restore or get_state/set_state."""

    @model_validator(mode="before")
    @classmethod
    def _built(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("env") is None:  # (an assignment re-validates with both: the object built stays)
            if data.get("entry_point") is None:
                raise ConfigError("give entry_point ('module:attr' of your environment class) or env (the object)")
            factory, kwargs = load_entry_point(data["entry_point"], "entry_point"), data.get("kwargs", {})
            try:
                inspect.signature(factory).bind(**kwargs)
            except TypeError as err:
                raise ConfigError(f"kwargs {kwargs!r} do not fit {data['entry_point']}: {err}") from None
            except ValueError:  # a builtin without a signature: let the call tell
                pass
            data = {**data, "env": cls.wrap(factory(**kwargs))}
        missing = [m for m in ("reset", "step") if not callable(getattr(data["env"], m, None))]
        if missing:
            raise ConfigError(f"{type(data['env']).__name__} has no {' or '.join(missing)} method: expected "
                              f"gymnasium's reset(seed=...) -> (observation, info) and step(action) -> (observation, "
                              f"reward, terminated, truncated, info)")
        return data

    @classmethod
    def wrap(cls, built: Any) -> Any:
        """The wrapped object made of what ``entry_point`` built (itself here)."""
        return built

    @property
    def name(self) -> str:
        """The wrapped object's class name."""
        return type(self.env).__name__

    @property
    def turn_limit(self) -> int:
        return self.max_turns

    @property
    def gold(self) -> Any:
        """The wrapped object's ``gold`` attribute; None when it has none."""
        return getattr(self.env, "gold", None)

    def expert(self) -> str:
        """The wrapped object's ``expert()``."""
        self._check_open()
        if not callable(getattr(self.env, "expert", None)):
            return super().expert()
        return self.env.expert()

    def valid_actions(self) -> list[str]:
        """The wrapped object's ``valid_actions()``, else its ``action_space``: the list itself, or one
        ``sample()`` of it."""
        if callable(getattr(self.env, "valid_actions", None)):
            return list(self.env.valid_actions())
        space = getattr(self.env, "action_space", None)
        if isinstance(space, (list, tuple)) and space:
            return list(space)
        if callable(getattr(space, "sample", None)):
            return [space.sample()]
        raise NotImplementedError(f"{self.name} has no valid_actions() and no action_space (a list of actions or "
                                  "an object with sample()) to explore with")

    def reset(self, seed: int) -> str:
        space = getattr(self.env, "action_space", None)
        if callable(getattr(space, "seed", None)):
            space.seed(seed)
        out = self.env.reset(seed=seed)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{self.name}.reset(seed=...) must return (observation, info), got {_shape(out)}")
        return self._begin(self._text(out[0]))

    def _transition(self, action: str) -> Transition:
        out = self.env.step(action)
        if not (isinstance(out, tuple) and len(out) == 5):
            raise TypeError(f"{self.name}.step(action) must return (observation, reward, terminated, truncated, info), "
                            f"got {_shape(out)}")
        observation, reward, terminated, truncated, info = out
        if not isinstance(reward, Real) or not isinstance(info, Mapping):
            raise TypeError(f"{self.name}.step(action) must return a number as reward and a dict as info, got "
                            f"{type(reward).__name__} and {type(info).__name__}")
        info = dict(info)
        valid, tool_error = bool(info.pop("valid", True)), bool(info.pop("tool_error", False))
        success = bool(info["success"]) if "success" in info else bool(terminated) and reward > 0
        return Transition(self._text(observation), float(reward), bool(terminated), success, valid, tool_error,
                          info, bool(truncated))

    @property
    def can_snapshot(self) -> bool:
        return self._state_methods() is not None or self.copy_state

    def snapshot(self) -> Any:
        """The wrapper's step count and flags, and the wrapped object's state (its own, or a deep copy)."""
        methods = self._state_methods()
        inner = getattr(self.env, methods[0])() if methods else copy.deepcopy(self._copyable_env())
        return copy.deepcopy(self.__pydantic_private__), inner

    def restore(self, state: Any) -> None:
        private, inner = state
        methods = self._state_methods()
        if methods:
            getattr(self.env, methods[1])(inner)
        else:
            self._copyable_env()
            self.env = copy.deepcopy(inner)
        self.__pydantic_private__.update(copy.deepcopy(private))

    def _state_methods(self) -> tuple[str, str] | None:
        """The wrapped object's own pair of state methods, if it has one."""
        return next((pair for pair in (("snapshot", "restore"), ("get_state", "set_state"))
                     if all(callable(getattr(self.env, name, None)) for name in pair)), None)

    def _copyable_env(self) -> Any:
        if not self.copy_state:
            raise NotImplementedError(f"{self.name} has no snapshot()/restore() or "
                                      "get_state()/set_state(): add them, or set copy_state=True when a deep copy of "
                                      "it is its state")
        return self.env

    def _text(self, observation: Any) -> str:
        if not isinstance(observation, str):
            raise TypeError(f"{self.name}: expected a text observation, got {type(observation).__name__}")
        return observation


def _shape(value: Any) -> str:
    """``a tuple of 4`` or the type's name, for an error."""
    return f"a tuple of {len(value)}" if isinstance(value, tuple) else f"a {type(value).__name__}"
