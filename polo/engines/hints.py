"""Who writes the hints an agent reads after a mistake: ``hints: {source: template}`` or ``{source: teacher}``.

A hint answers one played turn that went wrong (SOPO's wrong answer, ReflectPO's erroneous state). It is appended
to that turn's observation as the next context shows it (``"<observation>, <hint>"``), so it is context, never a
trained token, and the environment's state (and the anchors) stay as they were.

* ``template``: the cheap stand-in, text built from the turn by a fixed rule (the environment's own, or the
  brancher's), with no model.
* ``teacher``: the ``teacher`` role (polo/roles/teacher.py) writes it, greedily, at most ``max_tokens`` tokens, from
  ``ask``: what the teacher is shown of the turn. Its fields are ``{context}`` (the context the policy read before
  the failed action, required), ``{action}`` (the failed action), ``{observation}`` (what the environment answered),
  ``{error}`` (what went wrong, in words) and ``{gold}`` (the environment's answer: a privileged teacher, like
  SOPO's, which sees the ground truth). The written text is cut at the first turn or action separator or line
  break, since the rendered context uses them as structure.

One teacher call serves every hint a step asks for at once (one batched greedy decode).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, field_validator

from polo.core.registry import ConfigError, Settings
from polo.core.templates import check_template
from polo.engines.replies import sample_replies
from polo.envs import ACTION_SEP, TURN_SEP

HINT_MARK = "hint: "
"""What a hint starts with as the policy reads it (a teacher's text gets it; the templates write it)."""
ASK_FIELDS = ("action", "observation", "error", "gold")
"""The fields ``ask`` may use besides the required ``{context}``."""


def quote(action: str) -> str:
    """An action quoted inside a hint, without the separators of the rendered context."""
    return action.replace(TURN_SEP, " ").replace(ACTION_SEP, " ").strip()


def cut(text: str) -> str:
    """A written hint up to its first turn separator, action separator or line break, stripped."""
    for stop in (TURN_SEP, ACTION_SEP, "\n"):
        text = text.split(stop)[0]
    return text.strip()


def with_hint(observation: str, hint: str) -> str:
    """The observation as the next context shows it, the hint appended."""
    return f"{observation}, {hint}"


@dataclass
class HintRequest:
    """One turn that asks for a hint: its ``context`` (what the policy read before ``action``), ``action``,
    ``observation``, ``error`` (what went wrong, in words), ``gold`` (the environment's answer, None when it has
    none) and ``template`` (the stand-in's text)."""

    context: str
    action: str
    observation: str
    error: str
    gold: str | None
    template: str


class Hints(Settings):
    """The source of the hints; see the module docstring."""

    source: Literal["template", "teacher"] = "template"
    """``template``: the fixed rule's text (no model); ``teacher``: the ``teacher`` role writes it from ``ask``."""
    ask: str = "{context}{action};{observation}|error: {error}|hint:"
    """What the teacher reads to write a hint (``source: teacher``): ``{context}`` and any of ``{action}``,
    ``{observation}``, ``{error}``, ``{gold}``."""
    max_tokens: int = Field(16, ge=1)
    """Longest teacher-written hint, in tokens."""

    @field_validator("ask")
    @classmethod
    def _ask(cls, value: str) -> str:
        return check_template(value, ("context",), ASK_FIELDS)

    def roles(self) -> set[str]:
        return {"teacher"} if self.source == "teacher" else set()

    def asks(self, requests: list[HintRequest], where: str) -> list[str]:
        """The teacher's prompt for each request (``where``: the recipe key of these settings, for the error)."""
        if "{gold}" in self.ask and any(r.gold is None for r in requests):
            raise ConfigError(f"{where}.ask shows the teacher {{gold}}, but the environment has no gold answer: "
                              f"drop {{gold}} from the ask")
        return [self.ask.format(context=r.context, action=r.action, observation=r.observation, error=r.error,
                                gold=r.gold) for r in requests]

    def write(self, setup, requests: list[HintRequest], where: str) -> list[str]:
        """The hint of each request as the policy reads it: the template's text, or ``hint: `` and the teacher's
        (the engine's ``setup.models["teacher"]``; one greedy batched decode), empty when the teacher wrote nothing.
        A teacher's call logs ``hints/written`` (its hints) and ``hints/empty_frac`` (the share left empty)."""
        if self.source == "template" or not requests:
            return [r.template for r in requests]
        teacher, asks = setup.models["teacher"], self.asks(requests, where)
        longest = int(teacher.encode_prompts(asks)[1].sum(1).max())
        limit = getattr(teacher.hf_model.config, "max_position_embeddings", None)
        if limit is not None and longest + self.max_tokens > limit:
            raise ConfigError(f"{where}: a teacher's hint request of {longest} tokens plus {self.max_tokens} hint "
                              f"tokens exceeds the teacher's {limit} positions: shorten {where}.ask or lower "
                              f"{where}.max_tokens")
        written = [cut(text) for text in sample_replies(teacher, asks, self.max_tokens, greedy=True)]
        setup.reward_context.log_metric("hints/written", float(len(written)))
        setup.reward_context.log_metric("hints/empty_frac", sum(not text for text in written) / len(written))
        return [f"{HINT_MARK}{text}" if text else "" for text in written]
