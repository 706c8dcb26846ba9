"""``DataPath``: a task knob naming local data, made absolute when validated.

A relative path is resolved against the working directory, so a run's config.yaml names the data wherever
the run is later evaluated or resumed from. ``data_path_knobs`` applies the same rule to a task config
without building the task (which would read the data).
"""
from __future__ import annotations

import os
from typing import Annotated, Any, get_args

from pydantic import AfterValidator


def absolute_path(value: str) -> str:
    """``value`` with ``~`` expanded, made absolute against the working directory and normalised."""
    return os.path.abspath(os.path.expanduser(value))


DataPath = Annotated[str, AfterValidator(absolute_path)]


def is_data_path(task_cls: type, key: str) -> bool:
    """Whether knob ``key`` of the Task class ``task_cls`` is a ``DataPath``."""
    field = task_cls.model_fields.get(key)
    if field is None:
        return False
    metadata = [*field.metadata, *(m for arg in get_args(field.annotation) for m in getattr(arg, "__metadata__", ()))]
    return any(isinstance(m, AfterValidator) and m.func is absolute_path for m in metadata)  # DataPath, DataPath | None


def data_path_knobs(task_cls: type, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the string values of its ``DataPath`` knobs made absolute."""
    return {k: absolute_path(v) if isinstance(v, str) and is_data_path(task_cls, k) else v
            for k, v in config.items()}
