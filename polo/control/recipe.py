"""Control recipes: ``kind: control`` YAML files whose keys besides the run's own (name, seed, ...) configure the
method the ``method`` key names."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from polo.control.methods.base import CONTROL_METHODS, ControlMethod
from polo.core.registry import ConfigError, Settings
from polo.train.config import parse_overrides, resolve_shipped
from polo.train.yaml_files import read_yaml_mapping

CONTROL_RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
RUN_KEYS = ("kind", "name", "description", "seed", "output_dir", "threads", "max_minutes")
EXTENDABLE = ("iterations", "total_steps", "max_minutes")
"""Keys a resumed control run may change."""


class ControlRecipe(Settings):
    """A control run: the method (built) and the settings of the run itself."""

    model_config = {**Settings.model_config, "arbitrary_types_allowed": True}

    kind: Literal["control"] = "control"
    name: str
    description: str = ""
    seed: int = 0
    output_dir: str = "runs"
    threads: int = Field(1, ge=1)
    """torch threads (small networks run fastest on one; run seeds as separate processes)."""
    max_minutes: float | None = Field(None, gt=0)
    """Stop after this much training time (a checkpoint is written), whatever ``iterations`` says."""
    method: ControlMethod

    def tree(self) -> dict[str, Any]:
        """Every setting, defaults filled in: the run's config.yaml."""
        run = {k: getattr(self, k) for k in RUN_KEYS}
        settings = self.method.model_dump(mode="json", exclude=self.method.derived_fields())
        return {**run, "method": self.method.registry_name, **settings}


def is_control_tree(tree: dict[str, Any]) -> bool:
    return tree.get("kind") == "control"


def control_recipe_path(name_or_path: str | Path) -> Path | None:
    """The control recipe ``name_or_path`` names (a shipped name or a file with ``kind: control``), else None."""
    path = Path(name_or_path)
    if path.is_file():
        return path if is_control_tree(read_yaml_mapping(path, "a recipe")) else None
    shipped = CONTROL_RECIPES_DIR / (path.name if path.suffix else f"{path.name}.yaml")
    return shipped if shipped.is_file() else None


def _set(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    keys = dotted.split(".")
    for k in keys[:-1]:
        child = node.get(k)
        if isinstance(child, str):
            child = {"name": child}
        node[k] = child = child if isinstance(child, dict) else {}
        node = child
    node[keys[-1]] = value


def load_control_recipe(recipe: str | Path | dict, overrides: list[str] = ()) -> ControlRecipe:
    """Read a control recipe (path, shipped name or dict), apply ``key.sub=value`` overrides, validate."""
    tree = dict(recipe) if isinstance(recipe, dict) else read_yaml_mapping(
        resolve_shipped(recipe, CONTROL_RECIPES_DIR, "control recipe"), "a recipe")
    for key, value in parse_overrides(list(overrides)):
        _set(tree, key, value)
    if not is_control_tree(tree):
        raise ConfigError(f"a control recipe has kind: control, got kind: {tree.get('kind')!r}")
    run = {k: tree[k] for k in RUN_KEYS if k in tree}
    settings = {k: v for k, v in tree.items() if k not in RUN_KEYS and k != "method"}
    method = CONTROL_METHODS.build({"name": tree.get("method", CONTROL_METHODS.default), **settings}, "method")
    if "name" not in run:
        raise ConfigError("a control recipe needs a name")
    return ControlRecipe(**run, method=method)


def load_control_run_config(run_dir: Path, overrides: list[str] = ()) -> ControlRecipe:
    """A control run's recipe from its config.yaml; only ``EXTENDABLE`` keys may be overridden."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{path} is missing: the run's configuration is lost, so it cannot be resumed")
    refused = [key for key, _ in parse_overrides(list(overrides)) if key not in EXTENDABLE]
    if refused:
        raise ConfigError(f"polo train --resume changes only {', '.join(EXTENDABLE)} of a control run; refused: "
                          f"{', '.join(refused)}")
    return load_control_recipe(path, overrides)


def default_control_run_dir(recipe: ControlRecipe) -> Path:
    return Path(recipe.output_dir) / f"{recipe.name}_s{recipe.seed}_{time.strftime('%Y%m%d-%H%M%S')}"


def dump_tree(tree: dict[str, Any]) -> str:
    return yaml.safe_dump(tree, sort_keys=False)
