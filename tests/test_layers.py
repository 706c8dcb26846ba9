"""polo's layering, read from the source with ``ast`` (no module is imported).

Imports between polo modules must form no cycle, and must never go from a lower layer to a higher one; between
two packages of one layer (a sideways import) only in a direction that ``SIDEWAYS`` allows. A module's layer is
that of its first package component under polo; modules directly in polo/ that are not layers themselves
(``polo/__init__.py``) are exempt, and so are their own imports.
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

LAYERS = [("core",), ("policy", "tasks", "envs", "engines", "inputs", "roles", "prompt_samplers", "evaluation", "dist"),
          ("methods",), ("train",), ("control",), ("arena", "cli", "catalog", "kinds")]
"""Lowest first; a package imports those of lower layers, and those of its own layer as ``SIDEWAYS`` allows.

``control`` (continuous control, a house of its own with inner layers of its own: tests/control/
test_control_layers.py) ranks just above ``train``: its math and policies need only ``core``, but its recipe and
trainer reuse train's run-folder machinery (overrides, checkpoints, the metrics log, the run lock, curves), and
nothing of the language-model side may depend on control (so ``import polo`` and the language-model registries
never need the optional gymnasium extra). ``kinds`` (the table of run kinds that ``cli`` and ``catalog`` dispatch
on) sits with the front ends it serves."""
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
SIDEWAYS = {
    "envs": (),  # text environments: a sandbox they need is passed in by their builder
    "tasks": ("envs",),  # the environment tasks wrap environments
    "policy": ("tasks",),  # the vision policy reads the image contract of an Example (polo.tasks.images)
    "roles": ("policy",),  # roles are models built on the policy's classes
    "engines": ("policy", "tasks", "envs"),  # engines sample the policy on examples and environments
    "evaluation": ("engines", "policy", "tasks"),  # evaluation samples with the engines' sampler
    "inputs": ("engines", "policy", "tasks", "envs"),  # providers read the engines' rollouts and their episodes
    "prompt_samplers": ("engines",),  # samplers keep groups of the engines' rollouts
    "dist": ("engines", "policy", "tasks"),  # workers run engines and rewards
    "arena": (), "kinds": (),
    "catalog": ("kinds",),  # the catalogue lists each kind's shipped recipes
    "cli": ("arena", "catalog", "kinds"),  # the commands run arenas, list the catalog and dispatch on the kind
}
"""Per package of a layer of several, the packages of the same layer it may import; any other import between
two of them is a sideways import (so is one from a package without a row here: give every new package one)."""


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted name → file of every module under the package directory ``root`` (a package is its __init__)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(path: Path, module: str, known: set[str]) -> set[str]:
    """The known modules that ``module`` (read from ``path``) imports anywhere, function bodies included,
    except under ``if TYPE_CHECKING:``. ``from x import y`` imports the module ``x.y`` when there is one,
    else ``x``; relative imports are resolved against the module's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    stack = [ast.parse(path.read_text(encoding="utf-8"), filename=str(path))]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the `else:` branch does run
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        stack.extend(ast.iter_child_nodes(node))
    return (found & known) - {module}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(graph[start])))]  # the DFS path, each node with its unvisited successors
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:  # node is the root of a component: pop it off the stack
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def layer_of(root: Path, path: Path, rank: dict[str, int] = RANK) -> str | None:
    """The first package component of a module under ``root``; None for a module directly in it that is not
    a layer itself (``__init__.py``): those are exempt."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else (path.stem if path.stem in rank else None)


def layering_problems(root: Path, package: str, layers: list[tuple[str, ...]] = LAYERS,
                      sideways: dict[str, tuple[str, ...]] = SIDEWAYS) -> list[str]:
    """Every import cycle, upward import, sideways import that ``sideways`` does not allow, and subpackage
    outside ``layers`` (lowest first, like ``LAYERS``), as readable lines."""
    rank = {name: r for r, names in enumerate(layers) for name in names}
    files = module_files(root, package)
    graph = {name: imported_modules(path, name, set(files)) for name, path in files.items()}
    where = {name: layer_of(root, path, rank) for name, path in files.items()}
    problems = [f"import cycle: {' <-> '.join(component)}" for component in cycles(graph)]
    problems += sorted({f"package {package}.{name} is in no layer of LAYERS" for name in where.values()
                        if name is not None and name not in rank})
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = rank.get(where[module]), rank.get(where[target])
            if src is not None and dst is not None and src < dst:
                problems.append(f"upward import: {module} ({where[module]}) imports {target} ({where[target]})")
            elif (src is not None and src == dst and where[module] != where[target] and len(layers[src]) > 1
                  and where[target] not in sideways.get(where[module], ())):
                problems.append(f"sideways import: {module} ({where[module]}) imports {target} ({where[target]}); "
                                f"SIDEWAYS lets {where[module]} import {list(sideways.get(where[module], ()))}")
    return problems


def test_polo_has_no_import_cycle_and_no_upward_import():
    root = Path(importlib.util.find_spec("polo").submodule_search_locations[0])  # finds, does not import
    problems = layering_problems(root, "polo")
    assert not problems, "polo's layering is broken:\n" + "\n".join(problems)


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package ``fake`` under ``root``, from relative path → source."""
    for name, source in files.items():
        path = root / "fake" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "fake"


BASE = {"__init__.py": "from fake.train import loop\n",  # the top __init__'s own imports are exempt
        "core/__init__.py": "", "core/math.py": "X = 1\n",
        "train/__init__.py": "", "train/loop.py": "from fake.core.math import X\n",
        "catalog.py": "import fake.train.loop\n"}


@pytest.mark.parametrize("extra, expected", [
    ({}, []),  # clean: every import goes down
    ({"core/math.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fake.train import loop\n"}, []),
    ({"train/loop.py": "from . import step\n", "train/step.py": "from .loop import X\n"},  # cycle in one layer
     ["import cycle: fake.train.loop <-> fake.train.step"]),
    ({"core/extra.py": "def f():\n    from ..train import loop\n"},  # upward, relative, inside a function
     ["upward import: fake.core.extra (core) imports fake.train.loop (train)"]),
    ({"train/loop.py": "from fake.core import math\nfrom . import step\n", "train/step.py": "from .. import catalog\n",
      "catalog.py": "from fake.train import loop\n"},  # both, like polo's catalog -> train -> catalog
     ["import cycle: fake.catalog <-> fake.train.loop <-> fake.train.step",
      "upward import: fake.train.step (train) imports fake.catalog (catalog)"]),
    ({"utils/__init__.py": ""}, ["package fake.utils is in no layer of LAYERS"]),
    ({"tasks/__init__.py": "", "tasks/env_task.py": "from fake.envs.grid import Grid\n",  # allowed direction
      "envs/__init__.py": "", "envs/grid.py": "from fake.core.math import X\n"}, []),
    ({"tasks/__init__.py": "", "tasks/sandbox.py": "X = 1\n",  # envs -> tasks: the direction not allowed
      "envs/__init__.py": "", "envs/codefix.py": "from fake.tasks.sandbox import X\n"},
     ["sideways import: fake.envs.codefix (envs) imports fake.tasks.sandbox (tasks); SIDEWAYS lets envs import []"]),
    ({"dist/__init__.py": "", "dist/pool.py": "def f():\n    from ..envs import grid\n",  # relative, in a function
      "envs/__init__.py": "", "envs/grid.py": "X = 1\n"},
     ["sideways import: fake.dist.pool (dist) imports fake.envs.grid (envs); SIDEWAYS lets dist import "
      "['engines', 'policy', 'tasks']"]),
])
def test_checker_on_synthetic_packages(tmp_path, extra, expected):
    root = write_package(tmp_path, {**BASE, **extra})
    assert layering_problems(root, "fake") == expected


def test_sideways_table_names_only_packages_of_the_same_layer():
    for package, allowed in SIDEWAYS.items():
        assert package in RANK and all(RANK[other] == RANK[package] != 0 for other in allowed), package
    several = {name for names in LAYERS if len(names) > 1 for name in names}
    assert set(SIDEWAYS) == several, "every package of a layer of several needs a SIDEWAYS row"


def test_cycles_finds_every_component_iteratively():
    chain = {str(i): {str(i + 1)} for i in range(5000)} | {"5000": {"0"}}  # deeper than Python's recursion limit
    assert cycles(chain) == [sorted(chain)]
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"e", "a"}}
    assert cycles(graph) == [["a", "b"], ["c", "d"]]  # a self-import is no cycle between modules


def test_the_house_diagram_names_exactly_the_top_level_folders():
    """docs/pipeline.md's "The house" diagram lists every folder directly under polo/ and no other."""
    root = Path(importlib.util.find_spec("polo").submodule_search_locations[0])
    text = (Path(__file__).resolve().parent.parent / "docs" / "pipeline.md").read_text(encoding="utf-8")
    diagram = text.split("## The house", 1)[1].split("```", 2)[1]
    named = {line.split()[0].rstrip("/") for line in diagram.splitlines()  # a folder's line starts at column 2
             if line.startswith("  ") and not line.startswith("   ") and line.split()[0].endswith("/")}
    folders = {p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert named == folders, f"in the diagram only: {sorted(named - folders)}; in polo/ only: {sorted(folders - named)}"
