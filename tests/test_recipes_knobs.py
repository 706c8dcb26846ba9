"""Every knob is read: a setting declared on a registered component is read by code, so a recipe that sets it
changes something.

A component reads its own settings as ``self.<field>`` (or ``cls.<field>``, ``getattr(self, "<field>")``) in
its class, a base class or a subclass; this test finds those reads in the source (an AST scan, no run). A few
settings are read elsewhere by design, listed in ``READ_ELSEWHERE`` with the module that reads them (checked to
mention the name): the trainer reads every shaping's ``weight``, the control trainer every method's
``eval_every``, ... A setting an input provider reads by name, ``component_setting(components, "<field>", ...)``,
counts as read for every component declaring it. A field found nowhere is a knob that does nothing (APPO's
estimator declared ``alpha``, which only the brancher's own ``alpha`` applies). Unknown keys in a recipe are refused
when it loads (components forbid extra fields), so together every key a recipe sets is one that is read.
"""
from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pydantic
import pytest
from pydantic import Field

import polo
from polo.catalog import ALL_REGISTRIES
from polo.core.registry import Component
from polo.envs.registry import ENVIRONMENTS
from polo.tasks.registry import TASKS

POLO = Path(polo.__file__).parent

READ_ELSEWHERE: dict[tuple[str, str], str] = {
    # (registry kind or class name, field) -> the module that reads it
    ("shaping", "weight"): "train/trainer.py",
    ("regularizer", "coef"): "train/update.py",
    **{("role", f): "train/critics.py" for f in ("lr", "warmup_steps")},
    **{("control method", f): "control/trainer.py" for f in ("eval_every", "checkpoint_every", "iterations")},
    **{("FlowPolicySettings", f): "control/policies/flow.py"
       for f in ("activation", "brownian_beta", "brownian_coef", "condition", "degenerate2gaussian", "hidden",
                 "interpolation", "log_std_init", "steps")},
    ("SNRLearningRate", "estimates"): "train/update.py",
    **{("DiDPO", f): "methods/didpo/inputs.py"
       for f in ("sim_thresh", "min_block_lines", "max_pairs_per_uid", "max_anchors_per_uid", "overhead_mode")},
    **{("VPO", f): "methods/vpo/answer_sets.py" for f in ("answers", "separator")},
    ("CoRT", "rubric_template"): "inputs/teacher_inputs.py",
    **{("Teacher", f): "inputs/teacher_inputs.py" for f in ("sibling_template", "negative_template", "top_k")},
    **{("GymTextEnvironment", f): "envs/gym_adapter.py" for f in ("entry_point", "kwargs")},  # and subclasses
}


def registered() -> dict[type, str]:
    """Every registered pydantic component class of polo → ``"<registry kind> <name>"`` (not the ones other tests
    register in the same process)."""
    out = {}
    for registry in (*ALL_REGISTRIES, TASKS, ENVIRONMENTS):
        for name, cls in registry:
            if isinstance(cls, type) and issubclass(cls, pydantic.BaseModel) and cls.__module__.startswith("polo."):
                out.setdefault(cls, f"{registry.kind} {name}")
    return out


@functools.cache
def class_reads(path: str) -> dict[str, frozenset[str]]:
    """Per class defined in the file ``path`` (by qualified name): the names its body reads as ``self.X``,
    ``cls.X`` or ``getattr(self, "X")``. One parse per file."""
    out: dict[str, frozenset[str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                names = set()
                for n in ast.walk(child):
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):
                        names.add(n.attr)
                    elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr"
                          and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)):
                        names.add(n.args[1].value)
                out[prefix + child.name] = frozenset(names)
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(Path(path).read_text()), "")
    return out


def self_reads(cls: type) -> frozenset[str]:
    """Names read as ``self.X``, ``cls.X`` or ``getattr(self, "X")`` in the body of ``cls``."""
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return frozenset()
    return class_reads(path).get(cls.__qualname__.split(".<locals>.")[-1], frozenset()) if path else frozenset()


def relatives(cls: type) -> list[type]:
    """``cls``, its pydantic bases and every subclass: the classes whose methods may read its fields on self."""
    found, stack = [], [cls]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return [c for c in cls.__mro__ if issubclass(c, pydantic.BaseModel) and not c.__module__.startswith("pydantic")] \
        + found


@functools.cache
def mentions(module: str) -> frozenset[str]:
    """Attribute names and string constants in a polo module."""
    tree = ast.parse((POLO / module).read_text())
    return frozenset(n.attr if isinstance(n, ast.Attribute) else n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Attribute) or (isinstance(n, ast.Constant) and isinstance(n.value, str)))


@functools.cache
def read_by_name() -> frozenset[str]:
    """The setting names polo's input providers read as ``component_setting(components, "<name>", default)``."""
    names = set()
    for path in POLO.rglob("*.py"):
        text = path.read_text()
        if "component_setting(" not in text:
            continue
        for n in ast.walk(ast.parse(text)):
            if (isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "component_setting"
                    and len(n.args) >= 2 and isinstance(n.args[1], ast.Constant)):
                names.add(n.args[1].value)
    return frozenset(names)


def unread_fields(cls: type, label: str) -> list[str]:
    """The fields of ``cls`` that no relative reads on itself, no provider reads by name and ``READ_ELSEWHERE``
    does not name (for its registry kind, the class or a base class)."""
    reads = frozenset().union(*(self_reads(c) for c in relatives(cls)), read_by_name())
    owners = {label.rsplit(" ", 1)[0], *(c.__name__ for c in cls.__mro__)}
    return [f for f in cls.model_fields if f not in reads and not any((o, f) in READ_ELSEWHERE for o in owners)]


def test_every_setting_of_every_component_is_read():
    unread = [f"{label} ({cls.__name__}).{f}" for cls, label in registered().items() for f in unread_fields(cls, label)]
    assert not unread, ("settings no code reads (a recipe setting them changes nothing): remove them, read them, or "
                        "name the module that reads them in READ_ELSEWHERE: " + ", ".join(unread))


@pytest.mark.parametrize("owner, field", sorted(READ_ELSEWHERE))
def test_each_setting_read_elsewhere_is_named_by_its_reader(owner, field):
    module = READ_ELSEWHERE[owner, field]
    assert field in mentions(module), f"{owner}.{field}: {module} neither reads .{field} nor names {field!r}"
    owners = [c for c, label in registered().items() if owner in (c.__name__, label.rsplit(" ", 1)[0])]
    assert any(field in c.model_fields for c in owners), f"READ_ELSEWHERE names {owner}.{field}: no such setting"


def test_an_unread_setting_is_caught():
    class Knobbed(Component):
        read: int = 1
        unread: float = Field(1.0, ge=0)
        """Declared, never used (as APPO's estimator had alpha)."""

        def __call__(self):
            return self.read

    assert unread_fields(Knobbed, "advantage knobbed") == ["unread"]
