"""The environment registry: ``@register_environment(name)`` on Environment subclasses, ``make(config)``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polo.core.registry import METHODS, ConfigError, Registry
from polo.envs.base import Environment, ProgramTester

ENVIRONMENTS: Registry = Registry("environment", ("polo.envs", METHODS))


def register_environment(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Decorator registering an Environment subclass under ``name``."""

    def decorator(cls: type[Environment]) -> type[Environment]:
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise TypeError(f"register_environment({name!r}) expects a subclass of polo.envs.Environment, got {cls!r}")
        return ENVIRONMENTS.register(name)(cls)

    return decorator


def make(name_or_config: str | dict[str, Any], sandbox: ProgramTester | None = None, **cfg: Any) -> Environment:
    """Build an environment from a name or ``{"name": ..., **knobs}``; keyword knobs override the mapping's.
    ``sandbox`` is given to an environment that runs programs (``runs_programs``) and to no other. Errors name
    the bad key or value (an unknown name lists the registered ones)."""
    if isinstance(name_or_config, str):
        config = {"name": name_or_config}
    elif isinstance(name_or_config, dict):
        config = dict(name_or_config)
    else:
        raise ConfigError(f"environment: expected a name or a mapping with a 'name' key, got {name_or_config!r}")
    config.update(cfg)
    if sandbox is not None and isinstance(config.get("name"), str) and ENVIRONMENTS.get(config["name"]).runs_programs:
        config["sandbox"] = sandbox
    return ENVIRONMENTS.build(config)
