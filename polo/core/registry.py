"""Registries of named components with typed, validated configuration.

A component is a pydantic model: its fields are its hyperparameters (unknown keys and wrong types are
rejected with the key's name), its class variables describe it (spec section, provenance, the inputs it
needs from the trainer). A registry maps names to component classes and builds them from config dicts.
"""
from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class Component(BaseModel):
    """Base class of every registered component; fields are hyperparameters."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True)

    spec: ClassVar[str] = ""
    """Spec section implemented, e.g. ``"single_turn_core.md §2"``."""
    provenance: ClassVar[str] = "CODE"
    """CODE, PAPER, SECONDARY or RECONSTRUCTED (see shared/specs/README.md)."""
    requires: ClassVar[frozenset[str]] = frozenset()
    """Inputs the trainer must provide: ``ref_logp``, ``values``, ``entropy``, ... ."""

    def needs(self) -> set[str]:
        """Inputs this configured instance needs (override when they depend on hyperparameters)."""
        return set(self.requires)

    # Components with state that persists across steps (trackers, probes, dual variables) override these;
    # the trainer checkpoints ``state_dict`` and calls ``after_update`` once per step, after the update.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def after_update(self, batch, context) -> dict[str, float]:
        """Hook after the policy update; ``context`` is a ``polo.core.context.StepContext``. Returns metrics."""
        return {}


C = TypeVar("C", bound=type)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key and what is expected."""


class Registry(Generic[C]):
    """Name → component class, for one pipeline stage (``advantage``, ``policy_loss``, ...)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, type] = {}

    def register(self, name: str):
        def decorator(cls: C) -> C:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            cls.registry_name = name
            self._entries[name] = cls
            return cls

        return decorator

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self):
        return iter(sorted(self._entries.items()))

    def get(self, name: str) -> type:
        if name not in self._entries:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; valid {self.kind} names: {', '.join(self.names())}"
            )
        return self._entries[name]

    def build(self, config: dict[str, Any] | str, key: str | None = None):
        """Build a component from ``{"name": ..., **hyperparameters}`` (or just a name)."""
        key = key or self.kind
        if isinstance(config, str):
            config = {"name": config}
        if not isinstance(config, dict) or "name" not in config:
            raise ConfigError(f"{key}: expected a mapping with a 'name' key, got {config!r}")
        params = {k: v for k, v in config.items() if k != "name"}
        cls = self.get(config["name"])
        try:
            return cls(**params)
        except ValidationError as err:
            problems = "; ".join(
                f"{key}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
                for e in err.errors()
            )
            raise ConfigError(problems) from None


ADVANTAGES: Registry = Registry("advantage")
POLICY_LOSSES: Registry = Registry("policy_loss")
DIVERGENCES: Registry = Registry("divergence")
AGGREGATIONS: Registry = Registry("aggregation")
SHAPING: Registry = Registry("shaping")
CREDIT: Registry = Registry("credit")
OPTIMIZER_HOOKS: Registry = Registry("optimizer_hook")
SAMPLERS: Registry = Registry("sampler")

ALL_REGISTRIES: tuple[Registry, ...] = (
    SAMPLERS,
    SHAPING,
    ADVANTAGES,
    CREDIT,
    POLICY_LOSSES,
    DIVERGENCES,
    AGGREGATIONS,
    OPTIMIZER_HOOKS,
)
