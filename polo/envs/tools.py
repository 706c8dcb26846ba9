"""An environment's actions as tools for a chat checkpoint's function calling (transformers' ``tools=`` convention).

An environment declares its tools with ``Environment.tools()``: Python functions with type hints and a Google-style
docstring (a description, then ``Args:`` describing every argument), each returning the action text a call stands
for, e.g. KBLookup's ``search(name) -> "s:<name>"``; or JSON schemas (``{"type": "function", "function": {"name",
"description", "parameters"}}``), whose calls the environment's own ``tool_action`` converts. ``tool_schemas``
gives the JSON schemas a chat template renders (``apply_chat_template(messages, tools=...)``; a function's schema
is transformers' ``get_json_schema`` of it, as ``apply_chat_template`` itself would build it), ``call_function``
the action text of a call of a function tool.

A ``ToolAction`` is an action text (what the environment receives and the history keeps) that carries the
assistant message it came from, so a later context shows the call again as the assistant's ``tool_calls``.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

ToolSpec = Callable[..., str] | Mapping[str, Any]
"""A tool as an environment declares it: a documented function returning action text, or a JSON schema."""


class ToolAction(str):
    """An action text with ``message``, the assistant message whose tool call (or unparseable text) gave it:
    ``{"role": "assistant", "content": ..., "tool_calls": [...]}``. Equal to, and hashed as, its text."""

    message: dict[str, Any]

    def __new__(cls, action: str, message: Mapping[str, Any]) -> "ToolAction":
        out = super().__new__(cls, action)
        out.message = dict(message)
        return out

    def __reduce__(self):
        return ToolAction, (str(self), self.message)


@lru_cache(maxsize=256)
def _function_schema(function: Callable[..., str]) -> dict[str, Any]:
    from transformers.utils import get_json_schema  # here: polo.envs stays importable without transformers loaded

    return get_json_schema(function)


def tool_name(tool: ToolSpec) -> str:
    """The name a call uses for ``tool``."""
    return tool["function"]["name"] if isinstance(tool, Mapping) else tool.__name__


def tool_schemas(tools: Sequence[ToolSpec]) -> tuple[dict[str, Any], ...]:
    """The JSON schemas of ``tools`` (functions through ``get_json_schema``; schemas as given, checked)."""
    out = []
    for tool in tools:
        if isinstance(tool, Mapping):
            if tool.get("type") != "function" or not isinstance(tool.get("function", {}).get("name"), str):
                raise ValueError(f"tool schema {dict(tool)!r}: expected {{'type': 'function', 'function': "
                                 "{'name': ..., 'description': ..., 'parameters': {...}}}")
            out.append(dict(tool))
        else:
            out.append(_function_schema(tool))
    return tuple(out)


def call_function(tools: Sequence[ToolSpec], name: str, arguments: Mapping[str, Any]) -> str | None:
    """The action text of calling the function tool ``name`` with ``arguments``; None when no function tool has
    that name or the arguments do not fit its signature (a missing, unknown or non-keyword argument)."""
    function = next((t for t in tools if not isinstance(t, Mapping) and t.__name__ == name), None)
    if function is None:
        return None
    try:
        inspect.signature(function).bind(**arguments)
    except TypeError:
        return None
    return str(function(**arguments))
