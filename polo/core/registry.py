"""Registries of named components with typed, validated configuration.

A component is a pydantic model: its fields are its hyperparameters (unknown keys and wrong types are
rejected with the key's name), its class variables describe it (paper, provenance, the inputs it
needs from the trainer). A registry maps names to component classes and builds them from config dicts.
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Any, ClassVar, Generic, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from polo.core.suggest import closest, unknown_key


def accepts_bool(annotation: Any) -> bool:
    """Whether a field annotated ``annotation`` takes ``True``/``False`` as such (``bool``, ``Any``, unions
    and containers holding one of them)."""
    return annotation is bool or annotation is Any or any(accepts_bool(a) for a in get_args(annotation))


class Settings(BaseModel):
    """Validated settings: unknown keys, inf and NaN are refused, and a YAML ``true``/``false`` is never read
    as a number (pydantic would take ``steps: true`` as 1). A field's docstring is its description."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and not accepts_bool(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, not the boolean {str(value).lower()}")
        return value


class Component(Settings):
    """Base class of every registered component; fields are hyperparameters."""

    model_config = ConfigDict(arbitrary_types_allowed=True, validate_assignment=True)

    paper: ClassVar[str] = ""
    """The publication the component implements, as ``"Title (arXiv:XXXX.XXXXX)"`` (empty when none)."""
    provenance: ClassVar[str] = "CODE"
    """Where the formulas were read: CODE (the authors' or a reference implementation), PAPER (the paper's
    full text), SECONDARY (third-party material quoting the method) or RECONSTRUCTED (from the abstract; the
    details are our choice)."""
    requires: ClassVar[frozenset[str]] = frozenset()
    """Inputs the trainer must provide: ``ref_logp``, ``values``, ``entropy_old``, ... (each the name of a
    registered input provider, and the name under which the input is written into the batch)."""
    whole_groups: ClassVar[bool] = False
    """True when the component must see every sample of a group at once (per-group objectives such as
    DRPO's): the updater then cuts micro-batches on group boundaries and config validation refuses a
    ``train.micro_batch_size`` that would split a group."""

    group_size: ClassVar[int | None] = None
    """The exact number of rollouts per prompt the component is defined for (POISE's pairs: 2), checked
    against ``rollout.samples_per_prompt`` when the recipe is validated; None: any."""

    def needs(self) -> set[str]:
        """Inputs this configured instance needs (override when they depend on hyperparameters)."""
        return set(self.requires)

    # Components with state that persists across steps (trackers, probes, dual variables) override these;
    # the trainer checkpoints ``state_dict`` and calls ``after_update`` once per step, after the update.
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def model_prompts(self, key: str, query) -> list:
        """The ``polo.core.model_prompts.ModelPrompts`` this component (recipe key ``key``) has a model read for
        ``query`` (a ``PromptQuery``) besides the task's prompts, for the context check; none here."""
        return []

    def check_with(self, components: dict[str, Any]) -> None:
        """Raise a ValueError when this component cannot work with the run's other ``components`` (checked when
        the recipe is validated, before any model is built)."""

    def before_training(self, context) -> dict[str, float]:
        """Hook once before the first step of a new run (not on resume: the state it sets is checkpointed);
        ``context`` is a ``polo.core.context.TrainingContext``. Returns metrics."""
        return {}

    def after_update(self, batch, context) -> dict[str, float]:
        """Hook after the policy update; ``context`` is a ``polo.core.context.StepContext``. Returns metrics."""
        return {}


def summary(cls) -> str:
    """The first paragraph of a component's docstring, on one line (what ``polo list`` and docs/config.md show)."""
    doc = (cls.__doc__ or "").strip()
    return doc.split("\n\n")[0].replace("\n", " ") if doc else ""


C = TypeVar("C", bound=type)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key and what is expected."""


def import_package(package: str) -> None:
    """Import the package ``package`` and every module below it (sub-packages included), in name order; a plain
    module is just imported."""
    root = importlib.import_module(package)
    found = pkgutil.walk_packages(getattr(root, "__path__", []), f"{package}.")
    for info in sorted(found, key=lambda info: info.name):
        importlib.import_module(info.name)


METHODS = "polo.methods"
"""The package of method folders (``polo/methods/NAME/``): each holds everything particular to one method, for
any stage, so every language-model registry discovers it beside its own stage folder."""


class Registry(Generic[C]):
    """Name → component class, for one pipeline stage (``advantage``, ``policy_loss``, ...).

    ``packages`` are the folders whose every module is imported on the first lookup (``import_package``): a
    module placed there registers its entries with the decorator, and no list names them. A caller never imports
    a particular entry's module, and plugins register more at any time. ``default`` is the entry a recipe gets
    when it names none.
    """

    def __init__(self, kind: str, packages: tuple[str, ...] = (), default: str | None = None):
        self.kind = kind
        self.packages = packages
        self.default = default
        self._registered: dict[str, type] = {}
        self._loaded = not packages

    @property
    def _entries(self) -> dict[str, type]:
        if not self._loaded:
            self._loaded = True
            for package in self.packages:
                import_package(package)
        return self._registered

    def register(self, name: str, replace: bool = False):
        """Decorator adding an entry under ``name``; a taken name is an error unless ``replace``."""
        def decorator(cls: C) -> C:
            if name in self._registered and not replace:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            cls.registry_name = name
            self._registered[name] = cls
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
            guess = closest(str(name), self.names())
            raise ConfigError(f"unknown {self.kind} {name!r}; {f'did you mean {guess}? ' if guess else ''}"
                              f"valid {self.kind} names: {', '.join(self.names())}")
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
                unknown_key(cls, e["loc"], f"{key}.", f"{key} {config['name']}") if e["type"] == "extra_forbidden"
                else f"{key}.{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')} "
                     f"(got {e.get('input')!r})" if e["loc"]
                else f"{key} {config['name']}: {e['msg'].removeprefix('Value error, ')}"
                for e in err.errors()
            )
            raise ConfigError(problems) from None


ADVANTAGES: Registry = Registry("advantage", ("polo.core.advantages", METHODS), default="grpo")
POLICY_LOSSES: Registry = Registry("policy_loss", ("polo.core.losses", METHODS), default="ppo_clip")
DIVERGENCES: Registry = Registry("divergence", ("polo.core.divergences",), default="k3")
AGGREGATIONS: Registry = Registry("aggregation", ("polo.core.aggregation",), default="token_mean")
SHAPING: Registry = Registry("shaping", ("polo.core.shaping", METHODS))
CREDIT: Registry = Registry("credit", ("polo.core.credit", METHODS))
OPTIMIZER_HOOKS: Registry = Registry("optimizer_hook", ("polo.core.optim_hooks",))
REGULARIZERS: Registry = Registry("regularizer", ("polo.core.regularizers", METHODS))
