"""The context an agent reads before its next action: text, chat messages or tool calls, within a token budget.

``lay_out`` renders an episode's first observation and its newest ``kept`` turns:
- as text, ``env.render`` + ``"|"`` (the built-in model's context);
- for a chat-template checkpoint, as messages: the first observation as the user's turn, then per kept turn the
  action as the assistant's and the observation as the tool's. With an environment that declares tools
  (``Environment.tools()``) the Example also carries their JSON schemas, and a turn whose action came from a tool
  call (a ``ToolAction``) is shown the way transformers' chat templates take one: the assistant message with
  ``tool_calls`` ``[{"type": "function", "id": "call00003", "function": {"name", "arguments"}}]``, then the tool
  message ``{"role": "tool", "name", "tool_call_id", "content": observation}``; a turn whose reply held no
  well-formed call is the assistant's text, and the observation the user's answer to it.

The token budget (``fitted``): the newest turns that fit in ``limit`` tokens are kept, the first observation always,
and one line ``[k earlier turns omitted]`` (after the first observation) stands for the dropped ones; an
environment with its own rendering (``plain_history`` false) is rendered with fewer turns and no such line. When
even the first observation and the newest turn do not fit, a one-line ConfigError names the turn, its token count
and the limit.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from polo.core.registry import ConfigError
from polo.envs import TURN_SEP, Environment, render_context
from polo.envs.tools import tool_schemas
from polo.tasks.base import Example

Context = str | Example


def omitted_line(k: int) -> str:
    """The line that stands for ``k`` dropped turns."""
    return f"[{k} earlier turn{'s' if k != 1 else ''} omitted]"


def call_id(turn: int) -> str:
    """The id of turn ``turn``'s tool call (9 letters and digits, which every template family accepts)."""
    return f"call{turn:05d}"


def turn_messages(action: str, observation: str, turn: int, tools: bool) -> list[dict[str, Any]]:
    """The messages of one played turn (see the module docstring)."""
    if not tools:
        return [{"role": "assistant", "content": action}, {"role": "tool", "content": observation}]
    message = getattr(action, "message", None) or {"role": "assistant", "content": str(action)}
    calls = message.get("tool_calls")
    if not calls:
        return [{"role": "assistant", "content": message.get("content", "")}, {"role": "user", "content": observation}]
    function = calls[0]["function"]
    assistant = {"role": "assistant", "tool_calls": [{"type": "function", "id": call_id(turn), "function": function}]}
    if message.get("content"):
        assistant["content"] = message["content"]
    result = {"role": "tool", "name": function["name"], "tool_call_id": call_id(turn), "content": observation}
    return [assistant, result]


def lay_out(env: Environment, history: Sequence[tuple[str, str]], kept: int, chat: bool, gold: str,
            note: bool = False) -> Context:
    """The context with the first observation and the newest ``kept`` turns; ``note``: the line that stands for
    the turns left out (plain-history environments)."""
    omitted = len(history) - min(kept, len(history))
    line = omitted_line(omitted) if note and omitted and env.plain_history else None
    if line is None:
        text = env.render(history, kept) + TURN_SEP
    else:
        text = render_context(f"{env.prompt}{TURN_SEP}{line}", history, kept) + TURN_SEP
    if not chat:
        return text
    schemas = tool_schemas(env.tools())
    if not env.plain_history:
        messages = [{"role": "user", "content": text}]
    else:
        messages = [{"role": "user", "content": env.prompt if line is None else f"{env.prompt}\n{line}"}]
        for turn in range(omitted, len(history)):
            messages += turn_messages(*history[turn], turn, bool(schemas))
    return Example(text, gold, {}, tuple(messages), schemas or None)


@dataclass(frozen=True)
class ContextFit:
    """How contexts are measured against the model: ``count(context)`` is its tokens as the policy encodes it,
    ``positions`` the model's (None: unbounded), ``action_tokens`` the tokens kept free for the action."""

    count: Callable[[Context], int]
    positions: int | None
    action_tokens: int

    def limit(self, budget: int | str) -> int:
        """The most tokens a context may have under ``budget`` (a number, or ``model``: the model's positions minus
        the action tokens); never more than the model holds."""
        room = None if self.positions is None else self.positions - self.action_tokens
        if budget == "model":
            if room is None:
                raise ConfigError("task.context_tokens=model: the model states no max_position_embeddings; give "
                                  "task.context_tokens as a number of tokens")
            return room
        return int(budget) if room is None else min(int(budget), room)


def fitted(render: Callable[[int], Context], turns: int, count: Callable[[Context], int], limit: int, turn: int,
           why: str) -> Context:
    """``render(kept)`` for the most ``kept`` ≤ ``turns`` whose context has at most ``limit`` tokens, at least the
    newest turn kept (when there is one); ConfigError naming turn ``turn`` when even that does not fit."""
    least = min(1, turns)
    for kept in range(turns, least - 1, -1):
        context = render(kept)
        tokens = count(context)
        if tokens <= limit:
            return context
    raise ConfigError(f"task.context_tokens: turn {turn} needs {tokens} tokens with only the first observation and "
                      f"{'its newest turn' if least else 'nothing else'} kept, over the limit of {limit} ({why}): "
                      f"shorten the environment's observations or use a model with more positions")
