"""polo/control's inner layering, read from the source with ``ast`` by the checker of tests/test_layers.py.

Inside the control house imports flow down ``CONTROL_LAYERS`` and form no cycle: the pure math, then the
simulators and the networks, the rollout engines, the training loops, the recipe format, the run around a method,
and last the commands the command line calls.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.test_layers import layering_problems

CONTROL_LAYERS = [("math",), ("envs", "policies"), ("engines",), ("methods",), ("recipe",), ("trainer",),
                  ("commands",)]
"""Lowest first."""
CONTROL_SIDEWAYS = {"envs": (), "policies": ()}
"""The simulators and the networks do not import each other."""


def test_control_has_no_cycle_no_upward_and_no_sideways_import():
    root = Path(importlib.util.find_spec("polo").submodule_search_locations[0]) / "control"
    problems = layering_problems(root, "polo.control", CONTROL_LAYERS, CONTROL_SIDEWAYS)
    assert not problems, "polo.control's layering is broken:\n" + "\n".join(problems)


def test_the_checker_sees_an_upward_import(tmp_path):
    control = tmp_path / "control"
    for name, source in {"__init__.py": "", "math/__init__.py": "", "math/ops.py": "from polo.control import trainer\n",
                         "trainer.py": "from polo.control.math import ops\n"}.items():
        (control / name).parent.mkdir(parents=True, exist_ok=True)
        (control / name).write_text(source)
    assert layering_problems(control, "polo.control", CONTROL_LAYERS, CONTROL_SIDEWAYS) == [
        "import cycle: polo.control.math.ops <-> polo.control.trainer",
        "upward import: polo.control.math.ops (math) imports polo.control.trainer (trainer)"]
