"""The configuration reference, generated from the pydantic models: every recipe key with its type, default and
description (a field's ``Field(description=...)`` or the docstring under it), and every registered component's
knobs.

``polo config RECIPE [overrides]`` prints one recipe's resolved keys with the same descriptions;
``python -m polo.config_reference > docs/config.md`` writes the reference (a test keeps that file in sync).
"""
from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from polo.config_equivalents import EQUIVALENTS
from polo.core.registry import DIVERGENCES, REGULARIZERS, SHAPING, Registry, summary as first_paragraph
from polo.core.suggest import section_model
from polo.envs import ENVIRONMENTS
from polo.roles.base import ROLES
from polo.engines.branches import BRANCHERS
from polo.tasks.registry import TASKS
from polo.train.config import STAGES, Recipe, flatten_tree, resolved_tree

COMPONENTS: dict[str, Registry] = {"task": TASKS, **STAGES, "engine.tree": BRANCHERS, "shaping": SHAPING,
                                   "regularizers": REGULARIZERS, "kl.name": DIVERGENCES, "roles": ROLES}
"""Recipe keys whose value names registered components (``roles`` maps role names to their settings;
``engine.tree`` is a setting of the multi-turn engines)."""
REQUIRED = "(required)"
BOUNDS = {annotated_types.Gt: (">", "gt"), annotated_types.Ge: ("≥", "ge"), annotated_types.Lt: ("<", "lt"),
          annotated_types.Le: ("≤", "le")}


@dataclass(frozen=True)
class Key:
    """One configuration key: dotted name, type (with bounds), default and description."""

    key: str
    type: str
    default: Any
    description: str


def type_name(annotation: Any) -> str:
    """``int | None``, ``"constant" | "linear"``, ``dict[str, Any]``: a readable annotation."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def bounds(metadata: list) -> str:
    """``> 0``, ``≥ 0, ≤ 1``: the numeric bounds among a field's constraints."""
    return ", ".join(f"{BOUNDS[type(m)][0]} {getattr(m, BOUNDS[type(m)][1])}" for m in metadata if type(m) in BOUNDS)


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def keys(model: type[BaseModel], prefix: str = "") -> list[Key]:
    """Every key of a settings class, nested sections flattened into dotted keys."""
    out = []
    for name, field in model.model_fields.items():
        if section := section_model(model, [name]):
            out += keys(section, f"{prefix}{name}.")
            continue
        kind = ", ".join(filter(None, [type_name(field.annotation), bounds(field.metadata)]))
        default = REQUIRED if field.is_required() else to_jsonable_python(field.get_default(call_default_factory=True))
        out.append(Key(prefix + name, kind, default, one_line(field.description)))
    return out


def summary(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    return one_line(first_paragraph(cls))


def show(value: Any) -> str:
    """A value as it is written in a recipe or an override (YAML flow style)."""
    if value == REQUIRED:
        return value
    escaped = '"' if isinstance(value, str) and not value.isprintable() else None  # "\n" on one line, not a block
    return yaml.safe_dump(value, default_flow_style=True, default_style=escaped, width=10**9,
                          allow_unicode=True).removesuffix("\n...\n").strip()


def resolved_keys(recipe: Recipe) -> list[tuple[Key, Any]]:
    """Every key of ``recipe`` (components and roles with their full settings) paired with its value."""
    tree = resolved_tree(recipe)
    task = TASKS.build(tree["task"], "task")
    tree["task"] = {"name": task.registry_name, **task.model_dump(mode="json")}
    described = {k.key: k for k in keys(Recipe)}
    for key, registry in COMPONENTS.items():
        for name, prefix in _chosen(key, _section(tree, key.removesuffix(".name"))):
            cls = registry.get(name)
            described[f"{prefix}name"] = Key(f"{prefix}name", registry.kind, _default_name(key, registry), summary(cls))
            described.update({k.key: k for k in keys(cls, prefix)})
    env = tree["task"].get("env")
    if isinstance(env, dict) and "name" in env:  # the environment task's environment: a registry entry of its own
        cls = ENVIRONMENTS.get(env["name"])
        described["task.env.name"] = Key("task.env.name", ENVIRONMENTS.kind, None, summary(cls))
        described.update({k.key: k for k in keys(cls, "task.env.")})
    return [(_described(described, k), v) for k, v in flatten_tree(tree).items()]


def _described(described: dict[str, Key], key: str) -> Key:
    """``key``'s description: its own, or for an entry of a mapping setting (``engine.tree.composites.s2``) the
    mapping's (``engine.tree.composites``); an undescribed Key otherwise."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = described.get(".".join(parts[:n]))
        if found is not None:
            if n == len(parts):
                return found
            if found.type.startswith("dict"):
                return Key(key, found.type, None, found.description)
            break
    return Key(key, "", None, "")


def _default_name(key: str, registry: Registry) -> str | None:
    """The component a recipe gets for ``key`` when it names none."""
    field = Recipe.model_fields.get(key)
    default = field.get_default() if field else None
    return default.get("name") if isinstance(default, dict) else registry.default


def _section(tree: dict, key: str) -> Any:
    """The value of the dotted ``key`` in the resolved ``tree`` (None where a step is missing)."""
    for part in key.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _chosen(key: str, section: Any) -> list[tuple[str, str]]:
    """(component name, key prefix) for each component ``section`` of the resolved tree names under ``key``."""
    if key == "roles":
        return [(name, f"roles.{name}.") for name in section]
    if key == "kl.name":
        return [(section["name"], "kl.")]
    if isinstance(section, dict):
        return [(section["name"], f"{key}.")]
    return []


def resolved_text(recipe: Recipe) -> str:
    """``polo config``: one line per key, ``key = value  # description (default: D)``."""
    rows = [(f"{k.key} = {show(v)}", k) for k, v in resolved_keys(recipe)]
    width = min(48, max(len(head) for head, _ in rows))
    lines = [f"# {recipe.name}: {recipe.description}" if recipe.description else f"# {recipe.name}"]
    for head, k in rows:
        note = " ".join(filter(None, [k.description, f"(default: {show(k.default)})" if k.type else ""]))
        lines.append(f"{head:<{width}}  # {note}" if note else head)
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ([f"| {' | '.join(header)} |", "|" + " --- |" * len(header)]
            + [f"| {' | '.join(_cell(c) for c in row)} |" for row in rows])


def _key_rows(items: list[Key]) -> list[list[str]]:
    return [[f"`{k.key}`", f"`{k.type}`", f"`{show(k.default)}`", k.description] for k in items]


def _section_rows(items: list[Key]) -> list[list[str]]:
    """Rows of the top-level table; a component key points at its own section below."""
    return [row[:3] + [" ".join(filter(None, [row[3], f"Components: [{k.key}](#{k.key.replace('.', '')})."]))]
            if k.key in COMPONENTS else row for k, row in zip(items, _key_rows(items))]


def control_reference() -> list[str]:
    """The keys of control recipes (``kind: control``): the run's own, each method's, each control policy's and
    each control engine's."""
    from polo.control.engines.base import CONTROL_ENGINES
    from polo.control.methods.base import CONTROL_METHODS
    from polo.control.policies.base import CONTROL_POLICIES
    from polo.control.recipe import ControlRecipe

    header = ["key", "type", "default", "description"]
    run = [k for k in keys(ControlRecipe) if k.key != "method" and not k.key.startswith("method.")]
    out = ["", "## Control recipes", "",
           "A control recipe (`kind: control`, polo/control/recipes, docs/control.md) has the run keys below; "
           "`method` names its training loop, and every other top-level key is a setting of that method.", "",
           *_table(header, _key_rows(run))]
    for name, cls in CONTROL_METHODS:
        if cls.__module__.split(".")[0] != "polo":
            continue
        out += ["", f"### method: {name}", "", summary(cls), "", *_table(header, _key_rows(keys(cls)))]
    for key, registry, plural in (("policy", CONTROL_POLICIES, "policies"), ("engine", CONTROL_ENGINES, "engines")):
        rows = [[f"`{name}`", *(row or ["(no knobs)", "", "", ""])] for name, cls in registry
                if cls.__module__.split(".")[0] == "polo" for row in (_key_rows(keys(cls)) or [None])]
        out += ["", f"### {key}", "", f"Built-in control {plural} ({len(list(registry))}); "
                f"default `{registry.default}`.", "", *_table(["name", "knob", "type", "default", "description"], rows)]
    return out


def reference_markdown() -> str:
    """docs/config.md."""
    header = ["key", "type", "default", "description"]
    top = [k for k in keys(Recipe) if "." not in k.key]
    out = ["# Configuration reference", "",
           "Generated by `python -m polo.config_reference > docs/config.md` from the pydantic models (a test checks "
           "it is current). Set a key in a recipe YAML (`rollout: {temperature: 0.7}`) or on the command line "
           "(`polo train grpo rollout.temperature=0.7`); `polo config RECIPE [overrides]` prints every key of a "
           "recipe with its value, default and description. An unknown key is refused with the closest valid one.",
           "", "## Top-level keys", "", *_table(header, _section_rows(top)),
           "", "`polo list` names the registered tasks and rewards."]
    for name in Recipe.model_fields:
        if section := section_model(Recipe, [name]):
            doc = summary(section)
            out += ["", f"## {name}", "", *([doc, ""] if doc else []),
                    *_table(header, _section_rows(keys(section, f"{name}.")))]
    out += ["", "## Components", "",
            "A component key takes a registered name (`advantage: rloo`) or a mapping with the name and knobs "
            "(`advantage: {name: grpo, scale_by_std: false}`, on the command line `advantage.scale_by_std=false`); "
            "`roles` maps role names to their settings. `polo list` and docs/algorithms.md describe each component; "
            "`polo list` and `polo config` also show those a plugin registers."]
    for key, registry in COMPONENTS.items():
        builtin = [(name, cls) for name, cls in registry if cls.__module__.split(".")[0] == "polo"]
        rows = [[f"`{name}`", *(row or ["(no knobs)", "", "", ""])]
                for name, cls in builtin for row in (_key_rows(keys(cls)) or [None])]
        default = f" Default: `{registry.default}`." if registry.default else ""
        out += ["", f"### {key}", "", f"Built-in {registry.kind} components ({len(builtin)}).{default}", "",
                *_table(["name", "knob", "type", "default", "description"], rows)]
    out += control_reference()
    out += ["", "## Coming from TRL or verl", "",
            "TRL `GRPOConfig` fields and verl keys, and the polo keys that do the same. polo runs one process, so "
            "batch sizes are totals: a rollout batch is `rollout.prompts_per_step × rollout.samples_per_prompt` "
            "completions, split into `train.minibatches` optimizer steps per epoch, each in micro-batches of "
            "`train.micro_batch_size` rows.", "",
            *_table(["framework", "name", "polo", "note"],
                    [[e.framework, f"`{e.name}`", ", ".join(f"`{p}`" for p in e.polo) or "—", e.note]
                     for e in EQUIVALENTS])]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
