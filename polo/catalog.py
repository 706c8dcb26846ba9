"""The catalogue: registered components per stage and the shipped recipes (methods).

``polo list`` prints it; ``python -m polo.catalog > docs/algorithms.md`` writes the same as Markdown
(a test keeps that file in sync).
"""
from __future__ import annotations

import re
import sys
import textwrap

from polo.control.engines.base import CONTROL_ENGINES
from polo.control.methods.base import CONTROL_METHODS
from polo.control.policies.base import CONTROL_POLICIES
from polo.core.registry import (summary, ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES,
                                REGULARIZERS, SHAPING)
from polo.engines.base import ENGINES
from polo.engines.branches import BRANCHERS
from polo.kinds import RUN_KINDS
from polo.prompt_samplers.base import PROMPT_SAMPLERS
from polo.roles.base import ROLES
from polo.train.yaml_files import read_yaml_mapping

STAGE_KEYS = ("engine", "prompt_sampler", "shaping", "advantage", "credit", "policy_loss", "aggregation",
              "regularizers", "optimizer_hook")
PROVENANCE_ORDER = ("CODE", "PAPER", "SECONDARY", "RECONSTRUCTED")
REGISTRIES = {"engine": ENGINES, "prompt_sampler": PROMPT_SAMPLERS, "shaping": SHAPING, "advantage": ADVANTAGES,
              "credit": CREDIT, "policy_loss": POLICY_LOSSES, "aggregation": AGGREGATIONS,
              "regularizers": REGULARIZERS, "optimizer_hook": OPTIMIZER_HOOKS}
ALL_REGISTRIES = (*REGISTRIES.values(), BRANCHERS, DIVERGENCES, ROLES, CONTROL_METHODS, CONTROL_POLICIES, CONTROL_ENGINES)
DEFAULTS = {key: registry.default for key, registry in REGISTRIES.items() if registry.default}


_RST = re.compile(r":[a-z]+:`([^`]*)`|``([^`]*)``|`([^`]*)`")
WIDTH = 90
"""Characters of a description in ``polo list``."""


def plain(text: str) -> str:
    """``text`` without RST markup (double backticks, single backticks, ``:role:`...```), whitespace collapsed."""
    return " ".join(_RST.sub(lambda m: next(g for g in m.groups() if g is not None), text).split())


def short(text: str) -> str:
    """Plain ``text`` cut to ``WIDTH`` characters at a word boundary."""
    return textwrap.shorten(plain(text), WIDTH, placeholder=" …", break_on_hyphens=False)


def first_sentence(doc: str | None) -> str:
    return short(re.split(r"(?<=[.!?])\s", plain(doc or ""), maxsplit=1)[0])


def task_lines() -> list[str]:
    """Each registered task: the first sentence of its docstring, then its options (``key=default``; a required
    one by its name alone)."""
    from polo.config_reference import show
    from polo.tasks import TASKS, Task

    def default(value: object) -> object:  # a separator "\n" on one line, as a recipe writes it
        return show(value) if isinstance(value, str) and not value.isprintable() else value

    lines = []
    for name, cls in TASKS:
        fields = sorted(cls.model_fields.items(), key=lambda item: item[0] in Task.model_fields)  # its own first
        options = ", ".join(
            key if info.is_required() else f"{key}={default(info.get_default(call_default_factory=True))}"
            for key, info in fields)
        lines += [f"  {name:<26}{first_sentence(cls.__doc__)}", f"  {'':<26}options: {options}"]
    return lines


def reward_lines() -> list[str]:
    """Each registered reward with the first sentence of its docstring."""
    from polo.tasks.rewards import REWARDS

    return [f"  {name:<26}{first_sentence(fn.__doc__)}" for name, fn in REWARDS]


def _names(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [value["name"]]
    return [v["name"] if isinstance(v, dict) else v for v in value]


def recipe_rows() -> list[dict]:
    """One row per shipped recipe: its components per stage, papers and weakest provenance (of its components and of
    the rewards it names that carry a paper: a method whose mechanism is a reward)."""
    from polo.tasks.rewards import REWARDS

    rows = []
    for path in RUN_KINDS["lm"].recipes():
        tree = read_yaml_mapping(path, "a recipe")
        parts = {k: _names(tree.get(k, DEFAULTS.get(k))) for k in STAGE_KEYS}
        classes = [REGISTRIES[k].get(n) for k in REGISTRIES for n in parts[k] if n in REGISTRIES[k]]
        rewards = [REWARDS.get(n) for n in _names(tree.get("rewards")) if n in REWARDS]
        classes += [fn for fn in rewards if getattr(fn, "paper", "")]
        papers = sorted({c.paper for c in classes if c.paper})
        provenance = max((c.provenance for c in classes), key=PROVENANCE_ORDER.index, default="CODE")
        rows.append({"recipe": path.stem, "description": tree.get("description", ""), "parts": parts,
                     "papers": papers, "provenance": provenance})
    return rows


def control_recipe_rows() -> list[dict]:
    """One row per shipped control recipe (polo/control/recipes): its method, policy and environment, the
    papers of the method and the policy, and the weaker provenance of the two."""
    rows = []
    for path in RUN_KINDS["control"].recipes():
        tree = read_yaml_mapping(path, "a recipe")
        method = CONTROL_METHODS.get(tree.get("method", CONTROL_METHODS.default))
        policy_name = _names(tree.get("policy"))
        classes = [method, *(CONTROL_POLICIES.get(n) for n in policy_name if n in CONTROL_POLICIES)]
        env = tree.get("env", {}).get("id", "") if isinstance(tree.get("env"), dict) else ""
        rows.append({"recipe": path.stem, "description": tree.get("description", ""),
                     "method": method.registry_name, "policy": "+".join(policy_name), "env": env,
                     "papers": sorted({c.paper for c in classes if c.paper}),
                     "provenance": max((c.provenance for c in classes), key=PROVENANCE_ORDER.index)})
    return rows


def catalog_text() -> str:
    from polo.tasks import task_names
    from polo.tasks.rewards import reward_names

    lines = []
    total = 0
    for registry in ALL_REGISTRIES:
        entries = list(registry)
        total += len(entries)
        lines.append(f"{registry.kind} ({len(entries)}):")
        for name, cls in entries:
            where = f"  [{cls.provenance}]"
            lines.append(f"  {name:<26}{short(summary(cls))}{where}")
    lines.append(f"{total} components")
    lines.append(f"tasks ({len(task_names())}; options key=default, a bare key is required; "
                 f"set as task={{name: NAME, key: value}}):")
    lines += task_lines()
    lines.append(f"rewards ({len(reward_names())}; every task also has correct, its own verifier):")
    lines += reward_lines()
    lines.append("recipes:")
    for row in recipe_rows():
        parts = " ".join(f"{k}={'+'.join(v)}" for k, v in row["parts"].items() if v)
        lines.append(f"  {row['recipe']:<18}{row['description']}")
        lines.append(f"  {'':<18}{parts}  [{row['provenance']}]")
    lines.append("control recipes (kind: control, docs/control.md):")
    for row in control_recipe_rows():
        lines.append(f"  {row['recipe']:<26}{short(row['description'])}")
        lines.append(f"  {'':<26}method={row['method']} policy={row['policy'] or '-'} env={row['env'] or '-'}  "
                     f"[{row['provenance']}]")
    return "\n".join(lines)


def catalog_markdown() -> str:
    out = ["# Algorithms", "",
           "Generated by `python -m polo.catalog > docs/algorithms.md` (a test checks it is current); "
           "`polo list` prints the same. Papers are cited by title and arXiv id. Provenance: CODE = read "
           "from the authors' code, PAPER = the paper's full text, SECONDARY = third-party material quoting "
           "the method, RECONSTRUCTED = only the abstract was reachable, the math is our reading.", "",
           "## Methods (recipes)", "",
           "| recipe | method | components | papers | provenance |", "| --- | --- | --- | --- | --- |"]
    for row in recipe_rows():
        parts = "<br>".join(f"{k}: `{'`, `'.join(v)}`" for k, v in row["parts"].items() if v)
        out.append(f"| `{row['recipe']}` | {row['description']} | {parts} | {'; '.join(row['papers'])} | "
                   f"{row['provenance']} |")
    out += ["", "## Control methods (recipes in polo/control/recipes)", "",
            "| recipe | method | policy | environment | papers | provenance |", "| --- | --- | --- | --- | --- | --- |"]
    for row in control_recipe_rows():
        out.append(f"| `{row['recipe']}` | {row['description']} (`{row['method']}`) | `{row['policy'] or '-'}` | "
                   f"{row['env'] or '-'} | {'; '.join(row['papers'])} | {row['provenance']} |")
    for registry in ALL_REGISTRIES:
        entries = list(registry)
        out += ["", f"## {registry.kind} ({len(entries)})", "", "| name | what | paper | provenance |",
                "| --- | --- | --- | --- |"]
        for name, cls in entries:
            out.append(f"| `{name}` | {summary(cls)} | {cls.paper} | {cls.provenance} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(catalog_markdown())
