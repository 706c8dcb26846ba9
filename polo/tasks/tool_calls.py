"""The calculator tool-call schema of tool-integrated reasoning completions, and their format score.

A completion calls the calculator with ``<c>EXPR</c>`` (EXPR: integers, ``+ - * /`` and parentheses, checked by
``polo.tasks.expression``, never ``eval``-ed) and gives its final answer as ``<a>TEXT</a>``::

    <c>3*4</c>=12
    <c>12-5</c>=7
    <a>7 pears</a>

A call *matches the schema* when its opening tag is closed by ``</c>`` before any other tag starts and its
argument evaluates (exact integer arithmetic). The format score (PRS's first stage) is

    ``f = (calls that match) / max(calls opened, min_calls) · 1[a non-empty answer tag is present]``

so a completion with no call scores 0 when ``min_calls`` ≥ 1 (the answer of a tool-integrated task needs a
tool result), and one without an answer scores 0 whatever its calls.

The calculator's reply to a call (``call_result``) is ``=VALUE``, or ``=error`` when the argument of the call the
text ends with is not an expression it evaluates (or the closing tag has no opening one): the text an executed
call is followed by (``polo.engines.tool_use``), and the result written after each call of a demonstration.
"""
from __future__ import annotations

import re

from polo.tasks.expression import ExpressionError, evaluate

CALL_OPEN, CALL_CLOSE = "<c>", "</c>"
CALL = re.compile(r"<c>([^<]*)</c>")
LAST_CALL = re.compile(r"<c>([^<]*)</c>$")
ERROR = "=error"
ANSWER = re.compile(r"<a>([^<]*)</a>")


def call_matches(argument: str) -> bool:
    """Whether a call's argument is an expression the calculator evaluates."""
    try:
        evaluate(argument)
    except ExpressionError:
        return False
    return True


def calculator(argument: str) -> str:
    """``=VALUE`` of an argument the calculator evaluates, else ``=error``."""
    try:
        return f"={evaluate(argument)[0]}"
    except ExpressionError:
        return ERROR


def call_result(text: str) -> str:
    """The calculator's reply to the call ``text`` ends with (``text`` ends with ``</c>``): ``calculator`` of the
    argument after the last ``<c>``, ``=error`` when another tag comes between them or there is none."""
    call = LAST_CALL.search(text)
    return calculator(call.group(1)) if call else ERROR


def tagged_answer(text: str) -> str | None:
    """The stripped text of the last non-empty ``<a>…</a>``; None when there is none."""
    answers = [a.strip() for a in ANSWER.findall(text) if a.strip()]
    return answers[-1] if answers else None


def format_score(text: str, min_calls: int = 1) -> float:
    """``f`` of the module docstring, in [0, 1]."""
    if min_calls < 0:
        raise ValueError(f"min_calls must be >= 0, got {min_calls}")
    if tagged_answer(text) is None:
        return 0.0
    opened = text.count(CALL_OPEN)
    if max(opened, min_calls) == 0:
        return 1.0
    return sum(map(call_matches, CALL.findall(text))) / max(opened, min_calls)
