"""``load_entry_point("module:attr")``: the object a recipe names by its import path, e.g. a user's environment class.

``module`` is a dotted module on ``sys.path`` or a Python file (``my_env.py``, ``envs/my_env.py``); a dotted name that
does not import but is a file under the working directory (``my_env`` → ``./my_env.py``) is loaded as that file. A
file is imported as ``polo --plugin`` imports it (``polo.core.plugins.load_plugin``: once per path), so an entry point
into a file also given with ``--plugin`` names the same class. Every error is one ConfigError line naming the entry
point and what is expected.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any

from polo.core.plugins import load_plugin
from polo.core.registry import ConfigError

SHAPE = re.compile(r"^(?P<module>[^:]+):(?P<attr>[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)$")


def load_entry_point(spec: Any, key: str) -> Any:
    """The callable ``spec`` (``"module:attr"``) names; ``key`` is the recipe key that set it, for the error."""
    found = SHAPE.match(spec) if isinstance(spec, str) else None
    if found is None:
        raise ConfigError(f"{key}: expected 'module:attr' or 'file.py:attr' (e.g. 'my_env:MyEnv'), got {spec!r}")
    module, attr = found["module"], found["attr"]
    value = _module(module, spec, key)
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"{key}={spec!r}: {module} has no attribute {attr!r}")
        value = getattr(value, part)
    if not callable(value):
        raise ConfigError(f"{key}={spec!r}: {attr} is a {type(value).__name__}, not a class or function")
    return value


def _module(module: str, spec: str, key: str):
    """The module ``module`` names: imported from ``sys.path``, else loaded from its file."""
    is_file = module.endswith(".py") or "/" in module
    if not is_file:
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as err:
            if not (err.name and (module == err.name or module.startswith(f"{err.name}."))):
                raise  # the module was found and something it imports is missing: the user's own traceback
    file = Path(module) if is_file else Path(*module.split(".")).with_suffix(".py")
    if not file.is_file():
        raise ConfigError(f"{key}={spec!r}: no module {module!r} on sys.path and no file {file} under {Path.cwd()}"
                          if not is_file else f"{key}={spec!r}: no file {file} (read from {Path.cwd()})")
    return load_plugin(file)


def entry_point_file(spec: Any) -> Path | None:
    """The Python file the entry point ``spec`` loads its attribute from, found without running it (the module's own
    file: what it imports is not included); None for anything else."""
    found = SHAPE.match(spec) if isinstance(spec, str) else None
    if found is None:
        return None
    module = found["module"]
    if module.endswith(".py") or "/" in module:
        file = Path(module)
    else:
        try:
            where = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            where = None
        file = Path(where.origin) if where is not None and where.origin else Path(*module.split(".")).with_suffix(".py")
    return file if file.is_file() else None
