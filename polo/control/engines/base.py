"""The registry of control rollout engines (``engine.name`` in a control recipe).

Only control methods build these engines, so they have their own registry: the language-model ``ENGINES`` never
lists them and never imports control code.
"""
from __future__ import annotations

from polo.core.registry import Registry

CONTROL_ENGINES: Registry = Registry("control engine", ("polo.control.engines",), default="gym")
