"""polo/control's inner layering, read from the source with ``ast`` (the helpers of tests/test_layers.py).

Inside the control house imports flow down ``CONTROL_LAYERS`` and form no cycle: the pure math, then the
simulators and the networks, the rollout engines, the training loops, the recipe format, the run around a method,
and last the commands the command line calls.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.test_layers import cycles, imported_modules, module_files

CONTROL_LAYERS = [("math",), ("envs", "policies"), ("engines",), ("methods",), ("recipe",), ("trainer",),
                  ("commands",)]
"""Lowest first; the modules of one layer may import each other (but not in a cycle)."""
CONTROL_RANK = {name: rank for rank, names in enumerate(CONTROL_LAYERS) for name in names}


def control_problems(root: Path) -> list[str]:
    """Every import cycle inside polo.control, upward import between its inner layers, and module outside them."""
    files = module_files(root, "polo.control")
    graph = {name: imported_modules(path, name, set(files)) for name, path in files.items()}
    layer = {name: name.split(".")[2] if name.count(".") >= 2 else None for name in files}
    problems = [f"import cycle: {' <-> '.join(component)}" for component in cycles(graph)]
    problems += sorted({f"polo.control.{name} is in no layer of CONTROL_LAYERS" for name in layer.values()
                        if name is not None and name not in CONTROL_RANK})
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = CONTROL_RANK.get(layer[module]), CONTROL_RANK.get(layer[target])
            if src is not None and dst is not None and src < dst:
                problems.append(f"upward import: {module} ({layer[module]}) imports {target} ({layer[target]})")
    return problems


def test_control_has_no_cycle_and_no_upward_import():
    root = Path(importlib.util.find_spec("polo").submodule_search_locations[0]) / "control"
    problems = control_problems(root)
    assert not problems, "polo.control's layering is broken:\n" + "\n".join(problems)


def test_the_checker_sees_an_upward_import(tmp_path):
    control = tmp_path / "control"
    for name, source in {"__init__.py": "", "math/__init__.py": "", "math/ops.py": "from polo.control import trainer\n",
                         "trainer.py": "from polo.control.math import ops\n"}.items():
        (control / name).parent.mkdir(parents=True, exist_ok=True)
        (control / name).write_text(source)
    assert control_problems(control) == [
        "import cycle: polo.control.math.ops <-> polo.control.trainer",
        "upward import: polo.control.math.ops (math) imports polo.control.trainer (trainer)"]
