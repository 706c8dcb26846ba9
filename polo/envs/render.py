"""The policy's context for a text environment: the prompt and the last few (action, observation) turns.

``render_context(prompt, [(a1, o1), (a2, o2), ...], window)`` is ``"<prompt>|<a1>;<o1>|<a2>;<o2>"``: turns are
separated by ``TURN_SEP`` and an action from its observation by ``ACTION_SEP`` (the character that also ends
a decoded action). Only the last ``window`` turns are kept; the prompt is always kept, and nothing marks
the dropped turns. The string ends with the last observation (or the prompt): the next action is written
after another ``TURN_SEP``, as in the answer probe ``context + "|a:" + gold``.
"""
from __future__ import annotations

from collections.abc import Sequence

TURN_SEP = "|"
ACTION_SEP = ";"


def render_context(prompt: str, history: Sequence[tuple[str, str]], window: int = 4) -> str:
    """``prompt`` then the last ``window`` (action, observation) pairs of ``history``, as described above."""
    if window < 0:
        raise ValueError(f"history window must be >= 0, got {window}")
    kept = list(history)[-window:] if window else []
    return TURN_SEP.join([prompt, *(f"{action}{ACTION_SEP}{obs}" for action, obs in kept)])
