"""A chat checkpoint's reply read as one tool call: by the tokenizer's own response template, or in the Hermes / Qwen
format.

A tokenizer that carries a ``response_template`` (transformers' response parsing, ``tokenizer.parse_response(text,
prefix=prompt, tools=...)``, "Response Parsing", docs/source/en/chat_response_parsing.md) reads the reply itself: its
first ``tool_calls`` entry is the call. That parse reads the whole reply, so the whole reply is the call's span.
Otherwise the format parsed is the one Qwen2.5/Qwen3 and NousResearch's Hermes chat templates ask for when
``tools=`` are given (and transformers' tool-use guide shows):
``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>``, whitespace allowed inside the tags. The first such
block of the reply is the call; ``arguments`` may also be a JSON string of an object (as the OpenAI API writes it).
Text before the block is the message's ``content``; what comes after it (a second call included) is not read, so it
is not part of the action.

A reply with no call, a call whose body is not a JSON object with a string ``name`` and an object ``arguments``, or
an unclosed block is unparseable: its whole text is the message's content, and the environment then receives the
empty action ``""``, which it treats as the invalid action it is.

``check_renders_tools`` refuses a chat template that ignores ``tools=`` (the policy would never see the schema).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from polo.core.registry import ConfigError

TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


@dataclass(frozen=True)
class Reply:
    """A parsed reply: the assistant ``message`` (``content``, and ``tool_calls`` when a call was read), the
    ``call`` as ``(name, arguments)`` or None, and ``end``, the characters of the reply the parse read."""

    message: dict[str, Any]
    call: tuple[str, dict[str, Any]] | None
    end: int


def _arguments(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _unparsed(text: str) -> Reply:
    return Reply({"role": "assistant", "content": text.strip()}, None, len(text))


def _reply(content: str, name: Any, arguments: Any, end: int, text: str) -> Reply:
    """The reply with one call ``name(**arguments)``, or unparsed when the name is not a string or the arguments
    not an object (or a JSON string of one)."""
    arguments = _arguments(arguments)
    if not isinstance(name, str) or arguments is None:
        return _unparsed(text)
    function = {"name": name, "arguments": arguments}
    return Reply({"role": "assistant", "content": content, "tool_calls": [{"type": "function", "function": function}]},
                 (name, arguments), end)


def read_reply(tokenizer, text: str, prompt: list[int], tools) -> Reply:
    """The call of reply ``text`` to ``prompt`` (token ids): by the tokenizer's response template when it has one,
    else ``parse_reply``."""
    if getattr(tokenizer, "response_template", None) is None:
        return parse_reply(text)
    try:
        message = tokenizer.parse_response(text, prefix=prompt, tools=[dict(t) for t in tools])
    except (ValueError, KeyError, TypeError):  # a region the template cannot parse (bad JSON, ...)
        return _unparsed(text)
    calls = message.get("tool_calls") or [{}]
    function = calls[0].get("function") or {}
    return _reply((message.get("content") or "").strip(), function.get("name"), function.get("arguments", {}),
                  len(text), text)


def parse_reply(text: str) -> Reply:
    """The first Hermes-format tool call of ``text`` (see the module docstring)."""
    match = TOOL_CALL.search(text)
    if match is None:
        return _unparsed(text)
    try:
        body = json.loads(match.group(1))
    except ValueError:
        return _unparsed(text)
    if not isinstance(body, dict):
        return _unparsed(text)
    return _reply(text[: match.start()].strip(), body.get("name"), body.get("arguments", {}), match.end(), text)


def check_renders_tools(tokenizer, schemas) -> None:
    """ConfigError, in one line, when the tokenizer's chat template renders a conversation the same with and
    without ``tools=schemas``."""
    probe = [{"role": "user", "content": "hi"}]
    with_tools = tokenizer.apply_chat_template(probe, tools=[dict(s) for s in schemas], tokenize=False,
                                               add_generation_prompt=True)
    if with_tools == tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True):
        raise ConfigError("the checkpoint's chat template renders no tools (apply_chat_template ignores tools=), so "
                          "the policy would never see the environment's tool schemas: use a checkpoint whose template "
                          "renders them (Qwen2.5, Hermes, ...) or set the tokenizer's chat_template to one that does")
