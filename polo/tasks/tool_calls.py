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
"""
from __future__ import annotations

import re

from polo.tasks.expression import ExpressionError, evaluate

CALL_OPEN = "<c>"
CALL = re.compile(r"<c>([^<]*)</c>")
ANSWER = re.compile(r"<a>([^<]*)</a>")


def call_matches(argument: str) -> bool:
    """Whether a call's argument is an expression the calculator evaluates."""
    try:
        evaluate(argument)
    except ExpressionError:
        return False
    return True


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
