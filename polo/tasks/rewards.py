"""Reward functions with the TRL signature, their registry, and batch scoring.

A reward function is called once per batch with keyword arguments,
``fn(prompts=..., completions=..., **columns) -> list[float]``: ``prompts`` and ``completions`` are lists
of B strings, ``columns`` holds ``answer`` (the B reference answers) and every extra column of the
examples (``Example.columns``), each as a list of length B. A function must accept ``**kwargs`` (it
receives every column), exactly as a reward function written for TRL's ``GRPOTrainer``, which therefore
runs unchanged here.

Generic rewards registered here (``c`` = completion stripped, ``a`` = answer stripped):

- ``exact_match``: 1.0 if ``c == a`` else 0.0.
- ``numeric_match``: 1.0 if the first number in the completion equals the first number in the answer
  (as floats, relative tolerance 1e-9), else 0.0 (also when either has no number).
- ``contains_answer``: 1.0 if ``a`` occurs in the completion else 0.0.
- ``digit_match``: positions aligned from the right (least significant digit first); the score is the
  number of positions where both strings have the same character divided by ``max(len(c), len(a))``.
  Missing or extra characters count as mismatches, so the score is 1.0 iff ``c == a``.
  Example: answer ``"85"``: ``"85"`` → 1, ``"75"`` → 0.5, ``"185"`` → 2/3, ``"8"`` → 0.
- ``char_match``: the same with positions aligned from the left (``"cba"`` vs ``"cbx"`` → 2/3).

Tasks add their own rewards (``Task.task_rewards()``, e.g. ``correct`` = the task's verifier), which
shadow registered rewards of the same name for that task; see ``resolve_reward``.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from polo.core.registry import ConfigError, Registry

if TYPE_CHECKING:
    from polo.tasks.base import Example, Task

RewardFn = Callable[..., list[float]]
"""``fn(prompts=list[str], completions=list[str], **columns) -> list[float]`` (TRL signature)."""

REWARDS: Registry = Registry("reward")


class RewardError(ValueError):
    """A reward function failed, exited or returned something other than B finite numbers; names the reward."""
RESERVED_COLUMNS = frozenset({"prompts", "completions", "answer"})


def register_reward(name: str, max_value: float = math.inf) -> Callable[[RewardFn], RewardFn]:
    """Decorator registering a TRL-signature reward function under ``name``; ``max_value`` is the largest
    value it returns (``inf``: unbounded or unknown), read by estimators that need the reward's range."""

    def decorator(fn: RewardFn) -> RewardFn:
        fn.max_value = float(max_value)
        return REWARDS.register(name)(fn)

    return decorator


def get_reward(name: str) -> RewardFn:
    """The registered reward ``name``; an unknown name raises a ValueError listing the valid ones."""
    return REWARDS.get(name)


def reward_names() -> list[str]:
    """Names of the registered (task-independent) rewards."""
    return REWARDS.names()


@dataclass(frozen=True)
class RewardSpec:
    """One reward component: a reward name and its weight in the total reward."""

    name: str
    weight: float = 1.0

    @classmethod
    def of(cls, spec: RewardSpec | Mapping[str, Any] | Sequence | str) -> RewardSpec:
        """Accept a RewardSpec, ``{"name": ..., "weight": ...}``, ``(name, weight)`` or a bare name."""
        if isinstance(spec, RewardSpec):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"name", "weight"}
            if unknown or "name" not in spec:
                raise ConfigError(f"rewards: expected keys 'name' and 'weight', got {dict(spec)!r}")
            name, weight = spec["name"], spec.get("weight", 1.0)
        elif len(spec) == 2:
            name, weight = spec
        else:
            raise ConfigError(f"rewards: expected (name, weight), got {spec!r}")
        if not isinstance(name, str) or isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ConfigError(f"rewards: expected a name and a numeric weight, got {spec!r}")
        if not math.isfinite(weight):
            raise ConfigError(f"rewards.{name}.weight: must be finite, got {weight!r}")
        return cls(name, float(weight))


def resolve_reward(task: Task, name: str) -> RewardFn:
    """The task's own reward ``name`` if it defines one, else the registered reward ``name``."""
    local = task.task_rewards()
    if name in local:
        return local[name]
    if name in REWARDS:
        return REWARDS.get(name)
    valid = ", ".join(sorted(set(local) | set(REWARDS.names())))
    raise ConfigError(f"unknown reward {name!r} for task {task.name!r}; valid reward names: {valid}")


def reward_maxima(task: Task, rewards: Sequence[RewardSpec]) -> torch.Tensor:
    """``[K]`` the largest value of each reward component: the task's declaration for its own rewards
    (``Task.reward_maxima``), the registered function's ``max_value`` otherwise, ``inf`` when undeclared."""
    own = task.reward_maxima()
    specs = [RewardSpec.of(s) for s in rewards]
    values = [own[s.name] if s.name in own else getattr(resolve_reward(task, s.name), "max_value", math.inf)
              for s in specs]
    return torch.tensor(values, dtype=torch.float32)


def batch_columns(examples: Sequence[Example]) -> dict[str, list]:
    """``{"answer": [...], **extra columns}``, each a list over the examples (the reward kwargs)."""
    keys = set(examples[0].columns) if examples else set()
    for ex in examples:
        if set(ex.columns) != keys:
            diff = sorted(set(ex.columns) ^ keys)
            raise ValueError(f"examples have different columns: {diff} missing in some examples")
    if keys & RESERVED_COLUMNS:
        raise ValueError(f"column names {sorted(keys & RESERVED_COLUMNS)} are reserved")
    columns = {"answer": [ex.answer for ex in examples]}
    columns.update({k: [ex.columns[k] for ex in examples] for k in sorted(keys)})
    return columns


def _where(name: str, fn: RewardFn) -> str:
    return f"reward {name!r} ({getattr(fn, '__qualname__', fn)!s})"


def _called(name: str, fn: RewardFn, **kwargs: Any) -> Any:
    """``fn(**kwargs)``; an exception or a ``sys.exit`` inside it becomes a RewardError naming the reward (a
    reward that exits must not end a run with status 0). Ctrl-C still interrupts."""
    try:
        return fn(**kwargs)
    except SystemExit as err:
        raise RewardError(f"{_where(name, fn)} called sys.exit({err.code!r}); a reward must return its scores") from None
    except Exception as err:
        raise RewardError(f"{_where(name, fn)} raised {type(err).__name__}: {err}") from err


def _checked(name: str, fn: RewardFn, values: Any, size: int) -> list[float]:
    """``values`` (a list, tuple, tensor or array) as B finite floats, or a RewardError naming the reward."""
    where = _where(name, fn)
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise RewardError(f"{where} must return a list of B numbers, got a {type(values).__name__}: {values!r:.200}")
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise RewardError(f"{where} must return a list of floats, got {values!r:.200}: {err}") from None
    if len(floats) != size:
        raise RewardError(f"{where} returned {len(floats)} values for a batch of {size}")
    bad = [v for v in floats if not math.isfinite(v)]
    if bad:
        raise RewardError(f"{where} returned non-finite values {bad[:5]}")
    return floats


def score(
    task: Task, rewards: Sequence[RewardSpec], examples: Sequence[Example], completions: Sequence[str]
) -> tuple[torch.Tensor, tuple[str, ...], torch.Tensor]:
    """Score B completions with K rewards: ``(rewards [B, K] float32, names, weights [K] float32)``.

    Each reward function is called once with the whole batch and every column of the examples.
    """
    specs = [RewardSpec.of(s) for s in rewards]
    if not specs:
        raise ValueError("score: no rewards given")
    if len(examples) != len(completions):
        raise ValueError(f"score: {len(examples)} examples but {len(completions)} completions")
    prompts = [ex.prompt for ex in examples]
    columns = batch_columns(examples)
    values = []
    for spec in specs:
        fn = resolve_reward(task, spec.name)
        out = _called(spec.name, fn, prompts=prompts, completions=list(completions), **columns)
        values.append(_checked(spec.name, fn, out, len(examples)))
    table = torch.tensor(values, dtype=torch.float32).reshape(len(specs), len(examples))
    overflow = ~torch.isfinite(table)
    if overflow.any():  # finite in float64, beyond float32's ±3.4e38
        k, i = (int(x) for x in overflow.nonzero()[0])
        raise RewardError(f"reward {specs[k].name!r} returned {values[k][i]!r}, which overflows float32 "
                         f"(|value| must stay below 3.4e38)")
    weights = torch.tensor([s.weight for s in specs], dtype=torch.float32)
    return table.T.contiguous(), tuple(s.name for s in specs), weights


def position_match(completion: str, answer: str, from_right: bool = False) -> float:
    """Fraction of aligned positions with equal characters, over the longer stripped string."""
    c, a = completion.strip(), answer.strip()
    if from_right:
        c, a = c[::-1], a[::-1]
    longest = max(len(c), len(a))
    return 1.0 if longest == 0 else sum(x == y for x, y in zip(c, a)) / longest


def exact(completion: str, answer: str) -> bool:
    """The stripped completion equals the stripped answer."""
    return completion.strip() == answer.strip()


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def first_number(text: str) -> float | None:
    """The first (optionally signed, decimal) number in ``text``, or None."""
    match = _NUMBER.search(text)
    return float(match.group()) if match else None


@register_reward("exact_match", max_value=1.0)
def exact_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 if the stripped completion equals the stripped answer."""
    return [float(exact(c, a)) for c, a in zip(completions, answer)]


@register_reward("numeric_match", max_value=1.0)
def numeric_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 if the first number of the completion equals the first number of the answer."""
    out = []
    for c, a in zip(completions, answer):
        x, y = first_number(c), first_number(a)
        out.append(float(x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9)))
    return out


@register_reward("contains_answer", max_value=1.0)
def contains_answer(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 if the stripped answer occurs in the completion."""
    return [float(a.strip() in c) for c, a in zip(completions, answer)]


@register_reward("digit_match", max_value=1.0)
def digit_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """Partial credit aligned from the least significant digit (see the module docstring)."""
    return [position_match(c, a, from_right=True) for c, a in zip(completions, answer)]


@register_reward("char_match", max_value=1.0)
def char_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """Partial credit aligned from the first character (see the module docstring)."""
    return [position_match(c, a) for c, a in zip(completions, answer)]
