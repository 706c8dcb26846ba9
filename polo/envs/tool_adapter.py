"""An environment whose public methods are its tools (TRL's ``environment_factory`` convention), as a polo one.

TRL's ``GRPOTrainer(environment_factory=MyEnv)`` builds one ``MyEnv()`` per episode, calls ``reset(**columns)``
(its return, a text or None, is the first observation), exposes every public method other than ``reset`` as a tool
the model calls with arguments, feeds a tool's exception back as its message, and reads the episode's reward from
state the object keeps (``env.reward``, ``env.done``). polo follows that shape: ``reset(seed=...)`` (the episode's
seed is its only column), the action ``name:arg1,arg2`` (or a bare ``name``, or a JSON tool call ``{"name": ...,
"arguments": {...}}``, what a chat template's tool call carries) calls ``name(arg1, arg2)`` with each argument
converted to the type its annotation names (int, float, bool, str), and the step's reward is the change of
``reward`` since the previous step, so an episode's return is the object's final ``reward``. The episode terminates
when ``done`` turns true (an object without ``done`` runs to ``max_turns``) and succeeds when ``success`` is true,
or (without it) when its final ``reward`` is positive. An unknown tool or arguments that do not fit is an invalid
action; a tool that raises is a tool error whose message is the observation. ``expert()``, ``valid_actions()`` and
``gold`` are the object's when it has them (they are then not tools). For a chat checkpoint, ``tools()`` gives each
tool's JSON schema built from its signature and docstring, as TRL builds it, and a call becomes the JSON action.
"""
from __future__ import annotations

import inspect
import json
import typing
from numbers import Real
from typing import Any

from pydantic import Field

from polo.core.registry import ConfigError
from polo.envs.gym_adapter import GymTextEnvironment
from polo.envs.registry import register_environment
from polo.envs.tools import tool_schemas

NOT_TOOLS = frozenset({"reset", "expert", "valid_actions"})
"""Public methods that are the contract's, not tools."""
CONVERT = {int: int, float: float, bool: lambda text: text.strip().lower() in ("true", "1", "yes")}


class ToolCalls:
    """A TRL-style environment object seen through gymnasium's ``reset``/``step`` (for ``GymTextEnvironment``)."""

    def __init__(self, target: Any):
        self.target = target
        self.tools = {name: getattr(target, name) for name in dir(target)
                      if not name.startswith("_") and name not in NOT_TOOLS and inspect.ismethod(getattr(target, name))}
        if not callable(getattr(target, "reset", None)) or not self.tools:
            raise ConfigError(f"{type(target).__name__}: expected reset(**kwargs) and at least one public tool method "
                              f"(TRL's environment_factory convention), found tools {sorted(self.tools)}")
        self._last = 0.0

    def __getattr__(self, name: str) -> Any:
        if name in ("gold", "expert", "valid_actions"):  # the object's own, when it has them
            return getattr(self.target, name)
        raise AttributeError(name)

    def reset(self, seed: int) -> tuple[str, dict]:
        observation = self.target.reset(seed=seed)
        self._last = self._reward()
        return ("" if observation is None else observation), {}

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        try:
            tool, args = self.parse(action)
        except ValueError as err:
            return f"error: {err}", 0.0, self._done(), False, {"valid": False, "success": self._success()}
        try:
            observation, failed = tool(*args) if isinstance(args, list) else tool(**args), False
        except Exception as err:  # a tool's exception is its answer (TRL feeds the message back)
            observation, failed = f"error: {err}", True
        reward, before = self._reward(), self._last
        self._last = reward
        return observation, reward - before, self._done(), False, {"tool_error": failed, "success": self._success()}

    def parse(self, action: str) -> tuple[Any, list | dict]:
        """The tool and its arguments (a list, or a dict from a JSON call); ValueError saying what does not fit."""
        if action.lstrip().startswith("{"):
            try:
                call = json.loads(action)
                name, arguments = call["name"], call.get("arguments", {})
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ValueError(f"not a tool call {{\"name\": ..., \"arguments\": {{...}}}}: {action!r}") from None
            tool = self.tool(name)
            try:
                inspect.signature(tool).bind(**arguments)
            except TypeError as err:
                raise ValueError(f"{name}: {err}") from None
            return tool, dict(arguments)
        name, _, rest = action.partition(":")
        tool = self.tool(name.strip())
        params = list(inspect.signature(tool).parameters.values())
        texts = rest.split(",") if rest else []
        if len(texts) != len(params):
            raise ValueError(f"{name.strip()} takes {len(params)} argument(s) ({', '.join(p.name for p in params)}), "
                             f"got {len(texts)}")
        hints = typing.get_type_hints(tool)
        try:
            return tool, [CONVERT.get(hints.get(p.name), str)(text.strip()) for p, text in zip(params, texts)]
        except ValueError as err:
            raise ValueError(f"{name.strip()}: {err}") from None

    def tool(self, name: str) -> Any:
        if name not in self.tools:
            raise ValueError(f"no tool {name!r}; tools: {', '.join(sorted(self.tools))}")
        return self.tools[name]

    def _reward(self) -> float:
        reward = getattr(self.target, "reward", None)
        if not isinstance(reward, Real):
            raise TypeError(f"{type(self.target).__name__}.reward must be a number (TRL's convention: the episode's "
                            f"reward so far, kept on the object), got {type(reward).__name__}")
        return float(reward)

    def _done(self) -> bool:
        return bool(getattr(self.target, "done", False))

    def _success(self) -> bool:
        return bool(getattr(self.target, "success", self._last > 0))


@register_environment("tools")
class ToolEnvironment(GymTextEnvironment):
    """An object whose public methods are tools (TRL's ``environment_factory``): ``reset(**kwargs)``, state
    ``reward`` (and optionally ``done``, ``success``); an action ``name:arg1,arg2`` calls a tool."""

    max_turns: int = Field(10, ge=1)
    """Tool calls before the episode is truncated."""

    @classmethod
    def wrap(cls, built: Any) -> Any:
        """The tool object seen through ``reset``/``step`` (``ToolCalls``)."""
        return ToolCalls(built)

    @property
    def name(self) -> str:
        """The tool object's class name."""
        return type(self.env.target).__name__

    def tools(self) -> list[dict[str, Any]]:
        """The JSON schema of each tool method, for a chat checkpoint's function calling (transformers'
        ``get_json_schema``: TRL's convention, a docstring with ``Args:`` describing every argument)."""
        return list(tool_schemas(list(self.env.tools.values())))

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The JSON tool call ``step`` parses; None for a name that is no tool."""
        return json.dumps({"name": name, "arguments": dict(arguments)}) if name in self.env.tools else None
