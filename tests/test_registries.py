"""Registries discover their folders: no module lists its registry's members, every built-in entry lives in a folder
its registry discovers, and a new method is its files alone (an estimator file and a recipe) and trains."""
import ast
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from polo.cli import main
from polo.core.registry import (ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, METHODS, OPTIMIZER_HOOKS, POLICY_LOSSES,
                                REGULARIZERS, SHAPING)
from polo.control.engines.base import CONTROL_ENGINES
from polo.control.methods.base import CONTROL_METHODS
from polo.control.policies.base import CONTROL_POLICIES
from polo.engines.base import ENGINES
from polo.engines.branches import BRANCHERS
from polo.envs import ENVIRONMENTS
from polo.inputs.base import PROVIDERS
from polo.prompt_samplers.base import PROMPT_SAMPLERS
from polo.roles.base import ROLES
from polo.tasks import REWARDS, TASKS, load_plugin

ROOT = Path(importlib.util.find_spec("polo").submodule_search_locations[0])
REGISTRIES = (ADVANTAGES, AGGREGATIONS, CREDIT, DIVERGENCES, OPTIMIZER_HOOKS, POLICY_LOSSES, REGULARIZERS, SHAPING,
              ENGINES, BRANCHERS, ENVIRONMENTS, PROVIDERS, PROMPT_SAMPLERS, ROLES, REWARDS, TASKS, CONTROL_ENGINES,
              CONTROL_METHODS, CONTROL_POLICIES)


def registry_calls() -> list[tuple[str, ast.Call]]:
    """Every ``Registry(...)`` construction in polo's source, with the file it is in."""
    calls = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Registry":
                calls.append((str(path.relative_to(ROOT.parent)), node))
    return calls


def discovered_roots(call: ast.Call) -> list[str]:
    """The dotted names a ``Registry(kind, packages, ...)`` call discovers (``METHODS`` spelled out)."""
    packages = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "packages"),
                                                            ast.Tuple(elts=[]))
    assert isinstance(packages, ast.Tuple), f"packages must be a literal tuple, got {ast.dump(packages)}"
    return [METHODS if isinstance(e, ast.Name) and e.id == "METHODS" else e.value for e in packages.elts]


def module_path(dotted: str) -> Path:
    return ROOT.parent.joinpath(*dotted.split("."))


def test_no_registry_names_its_members():
    """A registry names folders (packages), or one module that is its whole stage (``polo.core.divergences``)."""
    calls = registry_calls()
    assert len(calls) >= 15, [f for f, _ in calls]
    for file, call in calls:
        roots = discovered_roots(call)
        modules = [r for r in roots if not (module_path(r) / "__init__.py").is_file()]
        assert all(Path(f"{module_path(r)}.py").is_file() for r in modules), (file, modules)
        assert len(modules) <= 1 and (not modules or len(roots) == 1), \
            f"{file}: a registry discovers folders, not a list of modules: {roots}"


def test_every_builtin_entry_lives_in_a_folder_its_registry_discovers():
    for registry in REGISTRIES:
        for name, entry in registry:
            module = getattr(entry, "fn", entry).__module__  # a provider wraps its function
            if not module.startswith("polo."):
                continue  # a plugin's or a test's own entry
            assert any(module == root or module.startswith(f"{root}.") for root in registry.packages), \
                f"{registry.kind} {name!r} is registered from {module}, outside {registry.packages}"


def test_no_init_imports_modules_to_register_them():
    for path in ROOT.rglob("__init__.py"):
        assert "(registers" not in path.read_text(encoding="utf-8"), path


ESTIMATOR = '''
"""Sign-GRPO, a method added as files only: the sign of the group-centred reward, A_i = sign(R_i - mean_g R)."""
from polo.core.advantages.base import SequenceAdvantage
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats

CALLS = []


@ADVANTAGES.register("sign_grpo_files_only")
class SignGRPO(SequenceAdvantage):
    """A_i = sign(R_i - mean_g R)."""

    def sequence_advantage(self, reward, group):
        CALLS.append(len(reward))
        return (reward - group_stats(reward, group)[0]).sign()
'''
RECIPE = """name: sign_grpo_files_only
description: "a method added as files only"
advantage: {name: sign_grpo_files_only}
policy_loss: {name: ppo_clip}
aggregation: {name: seq_mean_token_mean}
"""


def test_a_method_added_as_files_only_trains(tmp_path, tiny):
    """An estimator file and a recipe, nothing else edited: ``polo --plugin FILE train RECIPE`` trains with it."""
    (tmp_path / "sign_grpo.py").write_text(ESTIMATOR)
    (tmp_path / "sign_grpo.yaml").write_text(RECIPE)
    saved = dict(ADVANTAGES._entries)
    plugin = load_plugin(tmp_path / "sign_grpo.py")  # the CLI's --plugin finds it loaded: one module, one CALLS
    try:
        code = main(["--plugin", str(tmp_path / "sign_grpo.py"), "train", str(tmp_path / "sign_grpo.yaml"),
                     *tiny, "--run-dir", str(tmp_path / "run")])
    finally:
        ADVANTAGES._registered.clear()
        ADVANTAGES._registered.update(saved)
        del sys.modules[plugin.__name__]
    assert code == 0 and len(plugin.CALLS) >= 3  # one estimate per step
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "step" in r][-1] == 3
    assert "sign_grpo_files_only" in (tmp_path / "run" / "config.yaml").read_text()


@pytest.mark.parametrize("registry", REGISTRIES, ids=lambda r: r.kind)
def test_lookup_names_an_unknown_entry_and_the_valid_ones(registry):
    with pytest.raises(ValueError, match=f"unknown {registry.kind} 'no_such_entry'.*valid {registry.kind} names"):
        registry.get("no_such_entry")
