"""The prompts a run has a model read besides the task's own, for the context check (polo/train/context_check.py).

An input provider (``register_provider(..., prompts=...)``) or a component (``Component.model_prompts``) that renders
text for the policy or a model built from it (a teacher's privileged prompt, CoRT's rubric-conditioned prompt, a
judge's template, a guided engine's hinted prompt) returns them as ``ModelPrompts`` for the run's training examples.
The check runs before the warm start when the built-in model's context is known then, and refuses a run in which
one of them, with what the model reads after it, exceeds the model's positions, naming the recipe key that sets
the text. Text that only exists at run time (a sibling's response, a written hint) is left out of the rendered
prompt and counted at its longest in ``extra``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from polo.tasks.base import Example, Task


@dataclass
class PromptQuery:
    """What a hook renders for: the run's training ``examples``, ``task``, its response length
    ``max_new`` (tokens), its components by recipe key, the roles it builds by name, the inputs it plans
    (``needs``) and ``tokens(text)``: the token count of a text under the model's tokenizer."""

    examples: Sequence[Example]
    task: Task
    max_new: int
    components: dict[str, Any]
    roles: dict[str, Any]
    needs: set[str]
    tokens: Callable[[str], int]


@dataclass
class ModelPrompts:
    """Texts a model reads: ``prompts`` (strings or Examples, encoded as the policy encodes prompts), each followed
    or filled by up to ``sum(count for count, _ in extra)`` more tokens. ``label`` is the recipe key of the component
    or role (``credit.cort``, ``roles.teacher``), ``what`` the kind of text, ``source`` the recipe keys that set it
    and ``fix`` what shortens it; the check's one-line error is made of them."""

    label: str
    what: str
    source: str
    fix: str
    prompts: list[str | Example]
    extra: list[tuple[int, str]] = field(default_factory=list)
    """``(tokens, what they are)`` read besides the rendered prompt: the response, a sibling's response filled in,
    a judge's verdict."""
