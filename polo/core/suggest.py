"""Did-you-mean hints for unknown component names and unknown keys."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from pydantic import BaseModel


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word`` (difflib ratio ≥ 0.6), or None when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def section_model(model: type[BaseModel], path: Sequence) -> type[BaseModel] | None:
    """The settings class reached from ``model`` through the nested-section fields ``path`` (None when a step is
    not a section)."""
    for part in path:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        model = field.annotation if field else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return model


def unknown_key(model: type[BaseModel], loc: Sequence, prefix: str = "", section: str = "") -> str:
    """``unknown key 'rollout.prompts_per_steps' (did you mean rollout.prompts_per_step? valid keys in rollout:
    ...)`` for the key at ``loc`` of ``model``; ``prefix`` is prepended to dotted keys and ``section`` names
    ``model`` itself (empty: the top level)."""
    key = prefix + ".".join(str(p) for p in loc)
    target = section_model(model, loc[:-1])
    if target is None:
        return f"unknown key {key!r}"
    valid = list(target.model_fields)
    guess = closest(str(loc[-1]), valid)
    parent = key.rpartition(".")[0]
    hint = f"did you mean {parent + '.' if parent else ''}{guess}? " if guess else ""
    where = " ".join(filter(None, [section, ".".join(str(p) for p in loc[:-1])]))
    if not valid:
        return f"unknown key {key!r} ({where} takes no keys)"
    scope = f"in {where}" if where else "at the top level"
    return f"unknown key {key!r} ({hint}valid keys {scope}: {', '.join(valid)})"
