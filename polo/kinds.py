"""The kinds of run polo trains, as the one table ``RUN_KINDS`` that the command line (polo/cli.py: train, resume,
eval, config) and the catalogue (polo/catalog.py: the shipped recipes) dispatch on.

A recipe file's kind is its ``kind`` key (``lm``, a language-model recipe, when it has none); a shipped recipe's
is that of the folder that ships it; a run folder's is that of its config.yaml.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from polo.control import commands as control_commands
from polo.control.recipe import CONTROL_RECIPES_DIR
from polo.core.registry import ConfigError
from polo.train import commands as lm_commands
from polo.train.config import RECIPES_DIR
from polo.train.yaml_files import read_yaml_mapping

LANGUAGE_MODEL = "lm"
"""The kind of a recipe or run configuration without a ``kind`` key."""


@dataclass(frozen=True)
class Ui:
    """What the command line lends a kind's commands: ``log(message)``, ``progress_bar(total, start, describe)``
    → (a rich progress bar, ``update(step, row)``) with ``describe(row)`` → (text, whether the row is an
    evaluation), and the rich console of both."""

    log: Callable[[str], None]
    progress_bar: Callable
    console: Any


@dataclass(frozen=True)
class RunKind:
    """One kind of run: the folder of its shipped recipes and its commands, each ``(args, ui) -> exit status``
    but ``config_text(recipe, overrides)``, the resolved recipe as YAML."""

    name: str
    recipes_dir: Path
    train: Callable[[Any, Ui], int]
    evaluate: Callable[[Any, Ui], int]
    config_text: Callable[[str | None, list[str]], str]

    def recipes(self) -> list[Path]:
        """The shipped recipe files, by name."""
        return sorted(self.recipes_dir.glob("*.yaml"))

    def ships(self, name: str) -> bool:
        """Whether ``name`` (``grpo`` or ``grpo.yaml``) is one of the shipped recipes."""
        path = Path(name)
        return (self.recipes_dir / (path.name if path.suffix else f"{path.name}.yaml")).is_file()


RUN_KINDS: dict[str, RunKind] = {
    LANGUAGE_MODEL: RunKind(LANGUAGE_MODEL, RECIPES_DIR, lm_commands.train, lm_commands.evaluate,
                            lm_commands.config_text),
    "control": RunKind("control", CONTROL_RECIPES_DIR, control_commands.train, control_commands.evaluate,
                       control_commands.config_text),
}


def tree_kind(tree: dict[str, Any], where: str) -> RunKind:
    """The kind a recipe tree read from ``where`` declares; a ConfigError names an unknown one."""
    name = tree.get("kind", LANGUAGE_MODEL)
    if name not in RUN_KINDS:
        raise ConfigError(f"{where}: unknown kind {name!r}; valid kinds: {', '.join(sorted(RUN_KINDS))}")
    return RUN_KINDS[name]


def recipe_kind(recipe: str | None) -> RunKind:
    """The kind of the recipe ``recipe`` names: a file's own, else the kind that ships it (language model when
    none is named or none ships it: its loader then names the unknown recipe)."""
    if not recipe:
        return RUN_KINDS[LANGUAGE_MODEL]
    if Path(recipe).is_file():
        return tree_kind(read_yaml_mapping(Path(recipe), "a recipe"), recipe)
    return next((kind for kind in RUN_KINDS.values() if kind.ships(recipe)), RUN_KINDS[LANGUAGE_MODEL])


def run_kind(run: Path) -> RunKind:
    """The kind of the run folder ``run`` (its config.yaml's; language model when it has none, whose commands
    then say what is missing)."""
    config = Path(run) / "config.yaml"
    if not config.is_file():
        return RUN_KINDS[LANGUAGE_MODEL]
    return tree_kind(read_yaml_mapping(config, "a run configuration"), str(config))
