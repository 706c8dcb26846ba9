"""Reward functions with TRL's signature, their registry, and batch scoring.

A reward function is called once per batch with keyword arguments, exactly as TRL's ``GRPOTrainer`` calls
it, so a reward written for TRL runs unchanged here::

    fn(prompts=..., completions=..., completion_ids=..., answer=..., **columns,
       trainer_state=..., log_metric=...) -> list[float | None]

``prompts``, ``completions``, ``completion_ids`` (each completion's generated token ids, no padding, the stop
token included when generation stopped, as TRL passes them), ``answer`` and every extra column of the examples
(``Example.columns``) are lists of length B; for conversational examples (``Example.messages``) each prompt is
its list of messages and each completion ``[{"role": "assistant", "content": text}]``. ``trainer_state`` and
``log_metric`` are described in ``polo.tasks.reward_calls``. A function must accept ``**kwargs``.

``None`` in a reward's output means "no reward for this sample": the total reward is the weighted sum of the
present values (TRL's ``nansum``) and per-reward metrics average only present values. An ``async def`` reward is
awaited, concurrently with the batch's other async rewards.

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
- ``shortness``: ``max(0, 1 − (len(c)/len(a))²)``: 1 for an empty completion, 0 from the answer's length on (a
  conciseness objective that conflicts with any correctness reward; LambdaMix's second objective).
- ``vul_format``: 1.0 if the completion is a ``<think>…</think>`` block followed by an answer naming exactly
  one verdict, ``HAS_VUL`` or ``NO_VUL``, once (VULPO's format check), else 0.0.

The built-in rewards read a conversational completion's text. Tasks add their own rewards
(``Task.task_rewards()``, e.g. ``correct`` = the task's verifier), which shadow registered rewards of the same
name for that task; see ``resolve_reward``. From Python, a plain function is a reward too: ``RewardSpec.of(fn)``
registers it under its ``__name__``.
"""
from __future__ import annotations

import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from polo.core.registry import METHODS, ConfigError, Registry
from polo.tasks.reward_calls import RewardContext, run_concurrently

if TYPE_CHECKING:
    from polo.tasks.base import Example, Task

RewardFn = Callable[..., list[float | None]]
"""``fn(prompts=..., completions=..., completion_ids=..., **columns, trainer_state=..., log_metric=...)``
(TRL's signature; see the module docstring)."""

REWARDS: Registry = Registry("reward", ("polo.tasks", METHODS))


class RewardError(ValueError):
    """A reward function failed, exited or returned something other than B finite numbers; names the reward."""


RESERVED_COLUMNS = frozenset({"prompts", "completions", "completion_ids", "answer", "trainer_state", "log_metric"})
"""Keyword arguments of every reward call, so no example column may have these names."""


def register_reward(name: str, max_value: float = math.inf, paper: str = "",
                    provenance: str = "CODE") -> Callable[[RewardFn], RewardFn]:
    """Decorator registering a TRL-signature reward function under ``name``; ``max_value`` is the largest
    value it returns (``inf``: unbounded or unknown), read by estimators that need the reward's range. A reward
    that is a method's own mechanism names its ``paper`` and ``provenance`` (as components do: polo.core.registry),
    so the recipes that use it list that paper (``polo list``, docs/algorithms.md)."""

    def decorator(fn: RewardFn) -> RewardFn:
        fn.max_value, fn.paper, fn.provenance = float(max_value), paper, provenance
        return REWARDS.register(name)(fn)

    return decorator


def get_reward(name: str) -> RewardFn:
    """The registered reward ``name``; an unknown name raises a ValueError listing the valid ones."""
    return REWARDS.get(name)


def reward_names() -> list[str]:
    """Names of the registered (task-independent) rewards."""
    return REWARDS.names()


def function_reward(fn: RewardFn) -> str:
    """Register the Python function ``fn`` as a reward under its ``__name__`` and return that name; the same
    function again is fine, and so is its redefinition (same module and qualified name: a notebook cell run
    again, which replaces it); another function under a taken name (or a lambda, which has no name) is refused."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"rewards: a reward function needs a name to be registered under, got {fn!r}: "
                          f"define it with def (a lambda has no name)")
    old = REWARDS.get(name) if name in REWARDS else None
    redefined = old is not None and (getattr(old, "__module__", None), getattr(old, "__qualname__", None)) == (
        fn.__module__, fn.__qualname__)
    if old is None or redefined:
        REWARDS.register(name, replace=redefined)(fn)
    elif old != fn:
        raise ConfigError(f"rewards: {getattr(fn, '__qualname__', name)} cannot be registered as {name!r}: "
                          f"{_where(name, REWARDS.get(name))} is already registered under that name; rename one")
    return name


@dataclass(frozen=True)
class RewardSpec:
    """One reward component: a reward name and its weight in the total reward."""

    name: str
    weight: float = 1.0

    @classmethod
    def of(cls, spec: RewardSpec | Mapping[str, Any] | Sequence | str | RewardFn) -> RewardSpec:
        """Accept a RewardSpec, ``{"name": ..., "weight": ...}``, ``(name, weight)``, a bare name, a Python function
        or ``(function, weight)`` (the function is registered under its ``__name__``: ``function_reward``)."""
        if isinstance(spec, RewardSpec):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        if callable(spec):
            return cls(function_reward(spec))
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"name", "weight"}
            if unknown or "name" not in spec:
                raise ConfigError(f"rewards: expected keys 'name' and 'weight', got {dict(spec)!r}")
            name, weight = spec["name"], spec.get("weight", 1.0)
        elif len(spec) == 2:
            name, weight = spec
            name = function_reward(name) if callable(name) else name
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


def completion_texts(completions: Sequence) -> list[str]:
    """The text of each completion: a string as is, a conversational one (a list of messages) its last content."""
    return [c[-1]["content"] if isinstance(c, list) else c for c in completions]


def _where(name: str, fn: RewardFn) -> str:
    return f"reward {name!r} ({getattr(fn, '__qualname__', fn)!s})"


@contextmanager
def _guarded(name: str, fn: RewardFn) -> Iterator[None]:
    """An exception or a ``sys.exit`` inside the block becomes a RewardError naming the reward (a reward that
    exits must not end a run with status 0). Ctrl-C still interrupts."""
    try:
        yield
    except SystemExit as err:
        raise RewardError(f"{_where(name, fn)} called sys.exit({err.code!r}); a reward must return its scores") from None
    except Exception as err:
        raise RewardError(f"{_where(name, fn)} raised {type(err).__name__}: {err}") from err


def _called(name: str, fn: RewardFn, **kwargs: Any) -> Any:
    """``fn(**kwargs)``, guarded."""
    with _guarded(name, fn):
        return fn(**kwargs)


async def _awaited(name: str, fn: RewardFn, kwargs: dict[str, Any]) -> Any:
    """``await fn(**kwargs)``, guarded."""
    with _guarded(name, fn):
        return await fn(**kwargs)


def _checked(name: str, fn: RewardFn, values: Any, size: int) -> list[float | None]:
    """``values`` (a list, tuple, tensor or array) as B finite floats or None, or a RewardError naming the reward."""
    where = _where(name, fn)
    if hasattr(values, "tolist") and not isinstance(values, (list, tuple)):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise RewardError(f"{where} must return a list of B numbers, got a {type(values).__name__}: {values!r:.200}")
    try:
        floats = [None if v is None else float(v) for v in values]
    except (TypeError, ValueError) as err:
        raise RewardError(f"{where} must return a list of floats or None, got {values!r:.200}: {err}") from None
    if len(floats) != size:
        raise RewardError(f"{where} returned {len(floats)} values for a batch of {size}")
    bad = [v for v in floats if v is not None and not math.isfinite(v)]
    if bad:
        raise RewardError(f"{where} returned non-finite values {bad[:5]} (return None for a sample it does not score)")
    return floats


@dataclass
class Scores:
    """K rewards of B completions: ``values`` ``[B, K]`` float32 with 0 where a reward returned None, ``present``
    ``[B, K]`` bool (False there), the K ``names`` and ``weights`` ``[K]`` float32."""

    values: torch.Tensor
    present: torch.Tensor
    names: tuple[str, ...]
    weights: torch.Tensor


def score_batch(task: Task, rewards: Sequence[RewardSpec], examples: Sequence[Example], completions: Sequence[str],
                completion_ids: Sequence[Sequence[int]] | None = None, context: RewardContext | None = None) -> Scores:
    """Score B completions with K rewards, each function called once with the whole batch (see the module
    docstring); ``completion_ids`` are passed when given, ``context`` (default: a fresh one) supplies
    ``trainer_state`` and ``log_metric``. A sample that no reward scores warns, once per context."""
    specs = [RewardSpec.of(s) for s in rewards]
    if not specs:
        raise ValueError("score: no rewards given")
    if len(examples) != len(completions):
        raise ValueError(f"score: {len(examples)} examples but {len(completions)} completions")
    context = context or RewardContext()
    conversational = bool(examples) and examples[0].messages is not None  # as TRL: the first example decides
    prompts = [[dict(m) for m in ex.messages] if conversational else ex.prompt for ex in examples]
    kwargs = {"prompts": prompts, **batch_columns(examples), **context.kwargs(),
              "completions": [[{"role": "assistant", "content": c}] for c in completions] if conversational
              else list(completions)}
    if completion_ids is not None:
        kwargs["completion_ids"] = [list(ids) for ids in completion_ids]
    fns = [resolve_reward(task, s.name) for s in specs]
    waiting = [k for k, fn in enumerate(fns) if inspect.iscoroutinefunction(fn)]
    outputs = [None if k in waiting else _called(s.name, fn, **kwargs) for k, (s, fn) in enumerate(zip(specs, fns))]
    if waiting:
        done = run_concurrently([_awaited(specs[k].name, fns[k], kwargs) for k in waiting])
        for k, out in zip(waiting, done):
            outputs[k] = out
    columns = [_checked(s.name, fn, out, len(examples)) for s, fn, out in zip(specs, fns, outputs)]
    table = torch.tensor([math.nan if v is None else v for col in columns for v in col], dtype=torch.float32)
    table = table.reshape(len(specs), len(examples)).T
    present = ~table.isnan()
    overflow = present & ~table.isfinite()
    if overflow.any():  # finite in float64, beyond float32's ±3.4e38
        i, k = (int(x) for x in overflow.nonzero()[0])
        raise RewardError(f"reward {specs[k].name!r} returned {columns[k][i]!r}, which overflows float32 "
                          f"(|value| must stay below 3.4e38)")
    unscored = (~present.any(1)).nonzero()
    if len(unscored) and not context.warned_unscored:
        context.warned_unscored = True
        i = int(unscored[0])
        warnings.warn(f"every reward returned None for completion {completions[i]!r:.100} of prompt "
                      f"{prompts[i]!r:.100}; such a sample gets total reward 0 (shown once per run)",
                      RuntimeWarning, stacklevel=2)
    weights = torch.tensor([s.weight for s in specs], dtype=torch.float32)
    return Scores(table.nan_to_num(0.0).contiguous(), present, tuple(s.name for s in specs), weights)


def score(task: Task, rewards: Sequence[RewardSpec], examples: Sequence[Example], completions: Sequence[str],
          completion_ids: Sequence[Sequence[int]] | None = None, context: RewardContext | None = None
          ) -> tuple[torch.Tensor, tuple[str, ...], torch.Tensor]:
    """``score_batch``'s ``(values [B, K] float32, names, weights [K] float32)``: a reward's None is 0 there."""
    scores = score_batch(task, rewards, examples, completions, completion_ids, context)
    return scores.values, scores.names, scores.weights


def rule_scores(task: Task, names: Sequence[str], examples: Sequence[Example], completions: Sequence[str]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rewards ``names`` of each completion, unweighted (``[B, K]``, a reward's None is 0), and each one's
    largest value (``[K]``): what a rule judge (``roles.judge.backend: rule``) scores with."""
    specs = [RewardSpec(name, 1.0) for name in names]
    return score(task, specs, examples, completions)[0], reward_maxima(task, specs)


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
    return [float(exact(c, a)) for c, a in zip(completion_texts(completions), answer)]


@register_reward("numeric_match", max_value=1.0)
def numeric_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 if the first number of the completion equals the first number of the answer."""
    out = []
    for c, a in zip(completion_texts(completions), answer):
        x, y = first_number(c), first_number(a)
        out.append(float(x is not None and y is not None and math.isclose(x, y, rel_tol=1e-9)))
    return out


@register_reward("contains_answer", max_value=1.0)
def contains_answer(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 if the stripped answer occurs in the completion."""
    return [float(a.strip() in c) for c, a in zip(completion_texts(completions), answer)]


@register_reward("digit_match", max_value=1.0)
def digit_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """Partial credit aligned from the least significant digit (see the module docstring)."""
    return [position_match(c, a, from_right=True) for c, a in zip(completion_texts(completions), answer)]


@register_reward("char_match", max_value=1.0)
def char_match(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """Partial credit aligned from the first character (see the module docstring)."""
    return [position_match(c, a) for c, a in zip(completion_texts(completions), answer)]


@register_reward("shortness", max_value=1.0)
def shortness(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """``max(0, 1 − (len(c)/len(a))²)``: shorter than the answer earns more, quadratically (see the module docstring)."""
    return [max(0.0, 1.0 - (len(c.strip()) / max(len(a.strip()), 1)) ** 2)
            for c, a in zip(completion_texts(completions), answer)]


_THINK_THEN_ANSWER = re.compile(r"\s*<think>.*?</think>(.*)", re.DOTALL)
_VERDICT = re.compile(r"\b(?:HAS_VUL|NO_VUL)\b")


@register_reward("vul_format", max_value=1.0)
def vul_format(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 if the completion is ``<think>…</think>`` and then an answer with exactly one HAS_VUL / NO_VUL."""
    out = []
    for text in completion_texts(completions):
        match = _THINK_THEN_ANSWER.fullmatch(text)
        out.append(float(match is not None and len(_VERDICT.findall(match.group(1))) == 1))
    return out
