"""The pipeline is open: a plugin adds an engine, a model role, an input provider and a loss, and a run uses
them; polo/train names no particular component, engine, provider or role."""
import ast
import sys
from pathlib import Path

import pytest

import polo.train
from polo.core.registry import (ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES,
                                SHAPING)
from polo.roles.base import ROLES
from polo.engines.base import ENGINES
from polo.prompt_samplers.base import PROMPT_SAMPLERS
from polo.inputs.base import PROVIDERS
from polo.tasks import load_plugin
from polo.train.checkpoint import latest_checkpoint
from polo.train.config import load_recipe
from polo.train.trainer import Trainer

PLUGIN = Path(__file__).parent / "plugins" / "toy_pipeline.py"
REGISTRIES = (ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES, SHAPING, ROLES,
              ENGINES, PROMPT_SAMPLERS, PROVIDERS)


@pytest.fixture
def plugin():
    """The plugin loaded for one test; its registrations are removed afterwards."""
    saved = [dict(r._entries) for r in REGISTRIES]
    module = load_plugin(PLUGIN)
    yield module
    for registry, entries in zip(REGISTRIES, saved):
        registry._registered.clear()
        registry._registered.update(entries)
    del sys.modules[module.__name__]


def test_plugin_engine_role_provider_and_loss_train_three_steps(plugin, tiny, tmp_path):
    recipe = load_recipe("grpo", [*tiny, "engine.name=toy_engine",
                                  "policy_loss={name: toy_anchored_clip, coef: 0.5}"])
    trainer = Trainer(recipe, tmp_path, log=lambda *_: None)
    assert set(trainer.models) == {"toy_anchor"} and plugin.CALLS["role_built"] == 1
    rows = trainer.run()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert plugin.CALLS["engine"] >= 3 and plugin.CALLS["provider"] == 3 and plugin.CALLS["loss"] >= 3
    assert all(r["policy/anchor_gap"] >= 0 for r in rows[1:]) and rows[-1]["policy/anchor_gap"] > 0
    assert (latest_checkpoint(tmp_path) / "role.toy_anchor.safetensors").is_file()
    assert "toy_anchor:" in (tmp_path / "config.yaml").read_text()


def _names_in(path: Path) -> set[str]:
    """String constants (not docstrings) and identifiers of one module."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            out.add(node.value)
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.update({node.name, node.name.rsplit(".", 1)[-1]})
    return out


def test_train_names_no_particular_entry():
    entries = {(name, cls.__name__ if isinstance(cls, type) else "") for r in REGISTRIES for name, cls in r}
    forbidden = {n for pair in entries for n in pair if n} | {"polo.engines.single_turn", "polo.engines.sampler"}
    for path in Path(polo.train.__file__).parent.glob("*.py"):
        named = _names_in(path) & forbidden
        assert not named, f"{path.name} names {sorted(named)}"


def test_components_declare_every_input_they_read():
    """A component reading ``extras[name]`` (or ``batch.input(name)``) declares ``name`` in ``needs()``, so the
    trainer provides it and config validation can check it."""
    import inspect
    import re

    for registry in REGISTRIES[:7] + (PROMPT_SAMPLERS,):
        for name, cls in registry:
            read = set(re.findall(r'extras\["(\w+)"\]', inspect.getsource(cls)))
            assert read <= cls().needs() | set(cls.requires), (registry.kind, name, read - cls().needs())


def test_an_input_nobody_provides_is_refused_at_validation(tiny):
    from polo.core.losses.base import PolicyLoss
    from polo.core.registry import ConfigError

    class NeedsGhost(PolicyLoss):
        requires = frozenset({"old_logp", "ghost_input"})

    POLICY_LOSSES.register("needs_ghost")(NeedsGhost)
    try:
        with pytest.raises(ConfigError, match=r"policy_loss needs_ghost need\(s\) input\(s\) \['ghost_input'\]"):
            load_recipe("grpo", [*tiny, "policy_loss={name: needs_ghost}"])
    finally:
        del POLICY_LOSSES._registered["needs_ghost"]
