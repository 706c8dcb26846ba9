"""``load_plugin(path)``: import a user's Python file so that its registrations happen (tasks, rewards, environments).

The file is imported once per resolved path (loading it again returns the same module), under a module
name derived from that path, so ``@register_task`` / ``@register_reward`` decorators in it run once.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _module_name(file: Path) -> str:
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:10]
    return f"polo_plugin_{digest}_{file.stem}".replace("-", "_")


def is_loaded(path: str | Path) -> bool:
    """Whether the plugin file ``path`` was imported by ``load_plugin`` in this process."""
    return _module_name(Path(path).expanduser().resolve()) in sys.modules


def load_plugin(path: str | Path) -> ModuleType:
    """Import the Python file ``path`` (tasks, rewards or any other registered components)."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"plugin file not found: {str(path)!r}")
    name = _module_name(file)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import plugin {str(path)!r} (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
