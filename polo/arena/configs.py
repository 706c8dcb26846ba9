"""What an arena compares: the resolved settings whose values are not the same in every entry."""
from __future__ import annotations

import json
from typing import Any

from polo.arena.spec import Arena
from polo.control.recipe import ControlRecipe
from polo.train.config import flatten_tree, resolved_tree

ABSENT = "(absent)"
PROSE = ("description",)
"""Keys that are free text, not settings: never compared."""


def setting_text(value: Any) -> str:
    """A setting as the report shows it: strings as they are, anything else as JSON (``true``, ``null``, ``[1, 2]``)."""
    return value if isinstance(value, str) else json.dumps(value)


def run_tree(recipe) -> dict[str, Any]:
    """Every setting of a loaded recipe (language-model or control), defaults filled in."""
    return recipe.tree() if isinstance(recipe, ControlRecipe) else resolved_tree(recipe)


def config_differences(arena: Arena) -> dict[str, dict[str, str]]:
    """``{dotted key: {label: value as text}}`` for every resolved setting whose value differs between entries
    (``(absent)`` where an entry lacks it), in the recipes' order, free text aside. Each entry is resolved for
    the arena's first seed, so the seed, which every entry shares, never shows."""
    trees = {label: flatten_tree(run_tree(arena.runs_of(label)[0].load())) for label in arena.labels}
    keys = dict.fromkeys(k for tree in trees.values() for k in tree if k not in PROSE)
    missing = object()
    out = {}
    for key in keys:
        values = [tree.get(key, missing) for tree in trees.values()]
        if any(v != values[0] for v in values):
            out[key] = {label: ABSENT if v is missing else setting_text(v) for label, v in zip(trees, values)}
    return out
