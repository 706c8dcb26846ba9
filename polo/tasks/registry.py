"""The task registry: ``@register_task(name)`` on Task subclasses, ``build_task(config)``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polo.core.registry import METHODS, Registry
from polo.tasks.base import Task
from polo.tasks.paths import data_path_knobs

TASKS: Registry = Registry("task", ("polo.tasks", METHODS))


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Decorator registering a Task subclass under ``name``."""

    def decorator(cls: type[Task]) -> type[Task]:
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"register_task({name!r}) expects a subclass of polo.tasks.Task, got {cls!r}")
        return TASKS.register(name)(cls)

    return decorator


def build_task(config: dict[str, Any] | str) -> Task:
    """Build a task from ``{"name": ..., **knobs}`` (or a bare name); errors name the bad key/value."""
    return TASKS.build(config, key="task")


def normalize_task_config(config: dict[str, Any]) -> dict[str, Any]:
    """The task config as a run records it: its data paths absolute. Unchanged when its name is not
    registered (yet: a plugin may register it later; ``build_task`` reports an unknown name)."""
    name = config.get("name") if isinstance(config, dict) else None
    if not isinstance(name, str) or name not in TASKS:
        return config
    return data_path_knobs(TASKS.get(name), config)


def task_names() -> list[str]:
    return TASKS.names()
