"""Arena files: which recipes to compare, on which seeds, under which budget (validated, clear errors).

An arena file is YAML. Either a list of ``entries`` (each a recipe with its own overrides) or one
``recipe`` with a list of override ``variants``::

    name: default
    task: {name: addition}          # task.* overrides applied to every run
    seeds: [0, 1, 2]
    budget: {steps: 150, minutes: 4} # -> train.steps / train.max_minutes (whichever is spent first)
    overrides: [train.eval_every=10] # common overrides, applied before each entry's own
    target_accuracy: 0.6             # held-out greedy accuracy for the time-to-target column
    workers: 2
    entries:
      - {label: grpo, recipe: grpo}
      - {label: ppo_lr, recipe: ppo, overrides: [optim.lr=3e-4]}

or, instead of ``entries``: ``recipe: grpo`` with ``variants: [{label: lr_low, overrides: [optim.lr=1e-4]}, ...]``.
Optional ``claims``: papers' claims that compare two entries seed by seed (``Claim``; verdicts in
polo.arena.claims, the format in docs/arena.md).
A recipe is a shipped name, a path beside the arena file or a path from the working folder. Each run's
overrides apply in this order: task, budget, common, the entry's own, the command line's, then
``seed=<seed>`` and ``train.threads=1``.

Every run's recipe is resolved and validated when the file is loaded, so an unknown recipe name, an
unknown key or a bad override fails before anything trains.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from polo.arena.claim_metrics import check_metric
from polo.arena.summary import ACCURACY
from polo.control.recipe import ControlRecipe, control_recipe_path, load_control_recipe
from polo.core.registry import ConfigError, Settings
from polo.train.config import Recipe, load_recipe, resolve_shipped, validation_message
from polo.train.yaml_files import read_yaml_mapping

ARENAS_DIR = Path(__file__).resolve().parent.parent / "arenas"
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
THREADS = "train.threads=1"
"""Every arena run trains on one thread: N workers use N cores, and runs do not compete for them."""
CONTROL_THREADS = "threads=1"
"""The same setting of a control recipe."""


class Budget(Settings):
    steps: int | None = Field(None, gt=0)
    minutes: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _some_budget(self) -> "Budget":
        if self.steps is None and self.minutes is None:
            raise ValueError("budget: give steps, minutes or both")
        return self

    def overrides(self, control: bool = False) -> list[str]:
        """The run settings: ``train.steps`` / ``train.max_minutes``, or a control recipe's ``iterations`` /
        ``max_minutes``."""
        steps, minutes = ("iterations", "max_minutes") if control else ("train.steps", "train.max_minutes")
        out = [] if self.steps is None else [f"{steps}={self.steps}"]
        return out + ([] if self.minutes is None else [f"{minutes}={self.minutes}"])


class Entry(Settings):
    label: str | None = Field(None, pattern=LABEL_PATTERN)
    """Name in the report and of the run folders; default: the recipe's file name."""
    recipe: str
    overrides: list[str] = []


class Variant(Settings):
    label: str = Field(pattern=LABEL_PATTERN)
    overrides: list[str] = []


class ClaimTest(Settings):
    """One test of a claim on the per-seed difference ``d`` (treatment − baseline, negated when lower is
    better): superiority asks ``d > margin``, non-inferiority asks ``d > −margin`` (polo.arena.claims)."""

    metric: str
    """A metric of polo.arena.claim_metrics: final_accuracy, best_accuracy, accuracy_gain, auc,
    time_to_target, steps_to_target, mean:<key> or last:<key>."""
    direction: Literal["higher", "lower"]
    """Which way is better for the treatment."""
    kind: Literal["superiority", "non_inferiority"] = "superiority"
    margin: float = Field(0.0, ge=0)
    """In the metric's units: superiority needs the gain above it, non-inferiority allows a loss up to it."""

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, name: str) -> str:
        return check_metric(name)


class Claim(Settings):
    """A paper's headline claim, stated in one sentence and checked by comparing two entries seed by seed;
    it holds when every one of its tests holds."""

    id: str = Field(pattern=LABEL_PATTERN)
    statement: str = Field(min_length=1)
    """The claim in one sentence."""
    paper: str = Field(min_length=1)
    """Title and arXiv id of the paper that makes the claim."""
    treatment: str
    """Label of the entry the claim is about."""
    baseline: str
    """Label of the entry it is compared with."""
    tests: list[ClaimTest] = Field(min_length=1)

    @model_validator(mode="after")
    def _two_entries(self) -> "Claim":
        if self.treatment == self.baseline:
            raise ValueError(f"claim {self.id!r}: treatment and baseline are the same entry {self.treatment!r}")
        return self


class ArenaFile(Settings):
    name: str = Field(pattern=LABEL_PATTERN)
    description: str = ""
    task: dict[str, Any] = {}
    seeds: list[int] = Field(min_length=1)
    budget: Budget
    overrides: list[str] = []
    target_accuracy: float = Field(0.5, ge=0, le=1)
    metric: str | None = None
    """The evaluation metric runs are ranked by, higher is better: ``eval/greedy_accuracy`` (the default for
    language-model recipes) or a control method's metric (default: its headline, e.g. ``eval/return``)."""
    target: float | None = None
    """The time-to-target threshold in the units of ``metric``; default ``target_accuracy``."""
    workers: int = Field(1, gt=0)
    entries: list[Entry] = []
    recipe: str | None = None
    variants: list[Variant] = []
    claims: list[Claim] = []

    @model_validator(mode="after")
    def _one_form(self) -> "ArenaFile":
        if bool(self.entries) == bool(self.recipe):
            raise ValueError("give either 'entries' or 'recipe' with 'variants', not both or neither")
        if self.recipe and not self.variants:
            raise ValueError("'recipe' needs a list of 'variants'")
        if self.variants and not self.recipe:
            raise ValueError("'variants' need a 'recipe'")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        ids = [c.id for c in self.claims]
        if len(set(ids)) != len(ids):
            raise ValueError(f"claim ids repeat: {sorted({i for i in ids if ids.count(i) > 1})}")
        return self

    @property
    def target_value(self) -> float:
        return self.target_accuracy if self.target is None else self.target

    def resolved_entries(self) -> list[Entry]:
        if self.recipe:
            return [Entry(label=v.label, recipe=self.recipe, overrides=v.overrides) for v in self.variants]
        return [e if e.label else e.model_copy(update={"label": Path(e.recipe).stem}) for e in self.entries]


@dataclass(frozen=True)
class RunSpec:
    """One (entry, seed) pair: the recipe and the complete list of overrides for ``polo train``."""

    label: str
    seed: int
    recipe: str
    overrides: tuple[str, ...]
    control: bool = False
    """A control recipe (``kind: control``, polo.control.methods)."""

    @property
    def name(self) -> str:
        return f"{self.label}_s{self.seed}"

    def load(self) -> Recipe | ControlRecipe:
        if self.control:
            return load_control_recipe(self.recipe, list(self.overrides))
        return load_recipe(self.recipe, list(self.overrides))


@dataclass(frozen=True)
class Arena:
    """A validated arena: its file, the entries in order and every run to do."""

    file: ArenaFile
    source: Path
    labels: tuple[str, ...]
    runs: tuple[RunSpec, ...]
    shared_overrides: tuple[str, ...]
    """Overrides every run gets besides its entry's own and its seed (task, budget, common, command line)."""

    def runs_of(self, label: str) -> list[RunSpec]:
        return [r for r in self.runs if r.label == label]


def task_overrides(task: dict[str, Any], prefix: str = "task") -> list[str]:
    """``{name: addition, digits: 3}`` → ``["task.name=addition", "task.digits=3"]`` (nested keys dotted)."""
    out = []
    for key, value in task.items():
        if isinstance(value, dict):
            out += task_overrides(value, f"{prefix}.{key}")
        else:
            out.append(f"{prefix}.{key}={json.dumps(value)}")
    return out


def _recipe_ref(recipe: str, arena_dir: Path) -> str:
    """A recipe path relative to the arena file's folder when one is there; else as given (a path from the
    working folder or a shipped recipe's name)."""
    beside = arena_dir / recipe
    return str(beside) if not Path(recipe).is_absolute() and beside.is_file() else recipe


def resolve_arena_path(arena: str | Path) -> Path:
    """A path, or the name of a shipped arena (``default`` or ``default.yaml``)."""
    return resolve_shipped(arena, ARENAS_DIR, "arena")


def load_arena(arena: str | Path, overrides: list[str] = ()) -> Arena:
    """Read and validate an arena file; ``overrides`` (key=value) apply to every run, after all others."""
    path = resolve_arena_path(arena)
    tree = read_yaml_mapping(path, "an arena file")
    try:
        spec = ArenaFile.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(f"invalid arena file {path}: {validation_message(err, ArenaFile)}") from None
    entries = spec.resolved_entries()
    labels = [e.label for e in entries]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"invalid arena file {path}: entry labels repeat: {labels} (set 'label' on each entry)")
    for claim in spec.claims:
        for role in ("treatment", "baseline"):
            if getattr(claim, role) not in labels:
                raise ConfigError(f"invalid arena file {path}: claim {claim.id!r}: {role} {getattr(claim, role)!r} "
                                  f"is not an entry label; labels: {', '.join(labels)}")
    refs = {e.label: _recipe_ref(e.recipe, path.parent) for e in entries}
    kinds = {label: control_recipe_path(ref) is not None for label, ref in refs.items()}
    control = any(kinds.values())
    if control and not all(kinds.values()):
        raise ConfigError(f"invalid arena file {path}: control recipes ({', '.join(k for k, c in kinds.items() if c)}) "
                          f"and language-model recipes cannot share an arena: they have no metric in common")
    if control and spec.task:
        raise ConfigError(f"invalid arena file {path}: 'task' overrides a language-model task; a control arena sets "
                          f"its environment in 'overrides' (env.id=..., env.kwargs...)")
    threads = CONTROL_THREADS if control else THREADS
    common = task_overrides(spec.task) + spec.budget.overrides(control) + list(spec.overrides)
    runs = []
    for entry in entries:
        for seed in spec.seeds:
            run = RunSpec(entry.label, seed, refs[entry.label],
                          tuple(common + list(entry.overrides) + list(overrides) + [f"seed={seed}", threads]), control)
            try:
                loaded = run.load()
            except ConfigError as err:
                raise ConfigError(f"arena {path}, entry {entry.label!r}: {err}") from None
            runs.append(run)
            if spec.metric is None:
                spec = spec.model_copy(update={"metric": loaded.method.headline if control else ACCURACY})
    shared = common + list(overrides) + [threads]
    return Arena(spec, path, tuple(labels), tuple(runs), tuple(shared))
