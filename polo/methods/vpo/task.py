"""``answer_sets``: a base task's problems answered with several answers in one completion, VPO's multi-answer
prompting on the built-in model.

VPO scores a completion as the set of answers it gives (``polo.methods.vpo.advantage``); the authors rewrite each
prompt to ask for m solutions (ryanboldi/vpo ``docs/multi_answer_prompting.md``) because a model that writes one
answer gives VPO a set of one, whose score is a plain linear scalarization. The built-in model reads no
instructions, so here the request is in the demonstrations: the warm start shows each problem answered ``answers``
times, joined by ``separator``, the first answer the base task's demonstration and each later one, with
probability ``demo_noise``, a near miss of it (``near_miss``: cut short by its last character, or one character
changed to another of its kind; drawn by a generator seeded with a hash of the prompt): ``"37+48="`` →
``"85\\n8\\n85"``. Demonstrations of exact copies teach the model to copy its first answer (measured on addition:
the sampled sets were copies, and the best answer changed with the weights in under 0.5 % of the draws); the near
misses give the warm-started sets the spread a pretrained model asked for different answers has, and which
answers the sets keep is left to reinforcement learning. ``template`` rewrites the prompt (``{prompt}``,
``{answers}``) for a model that does read a request.

A completion's answers are its first ``answers`` non-empty pieces on ``separator`` (``split_answers``). It is
correct when one of them is (the best of the set, as the authors' pool metrics); every reward of the run scores
the set by its best answer (each reward's maximum over the answers; None when it returned None for every answer,
0 for a completion with no answer, as the authors score an unparsed set), so ``reward/NAME`` logs the best
answer's component. Scored alone, one answer gets what the base task gives it, so the ``answer_rewards`` input
(each answer scored as a completion) reads the base's rewards. The base task must write its completion as answer
only (no ``answer_marker``), and its answers must not contain ``separator``. Asynchronous rewards (served judges)
are not shadowed: they read the whole completion.
"""
from __future__ import annotations

import inspect
import math
import random
import string
import zlib
from collections.abc import Sequence
from typing import Any

from pydantic import Field, PrivateAttr

from polo.core.registry import ConfigError
from polo.methods.vpo.answer_sets import split_answers
from polo.tasks.base import Example, Split, Task, reprompt
from polo.tasks.registry import build_task, register_task
from polo.tasks.rewards import REWARDS, RESERVED_COLUMNS, RewardFn, RewardSpec, completion_texts, resolve_reward

KINDS = (string.digits, string.ascii_lowercase, string.ascii_uppercase)


def near_miss(text: str, rng: random.Random) -> str:
    """``text`` cut short by its last character or, evenly, with one of its digits or letters changed to another
    of its kind; ``text`` itself when neither applies (one character, or no digit or letter to change)."""
    if rng.random() < 0.5:
        return text[:-1] if len(text) > 1 else text
    spots = [(i, kind) for i, c in enumerate(text) for kind in KINDS if c in kind]
    if not spots:
        return text
    i, kind = rng.choice(spots)
    return text[:i] + rng.choice(kind.replace(text[i], "")) + text[i + 1:]


@register_task("answer_sets")
class AnswerSets(Task):
    """A base task's problems given several answers per completion: VPO's answer sets."""

    paper = "Vector Policy Optimization: Training for Diversity Improves Test-Time Search (arXiv:2605.22817)"
    provenance = "RECONSTRUCTED"
    """The authors' multi-answer prompting, in demonstrations (with near misses) for a model that reads no request."""

    base: str | dict[str, Any] = "addition"
    """The task whose problems are asked (a name or ``{name, knobs}``)."""
    answers: int = Field(3, ge=1, le=16)
    """m: answers per completion (the demonstrations write the base's demonstration m times)."""
    separator: str = Field("\n", min_length=1)
    """Text between two answers."""
    template: str = "{prompt}"
    """The prompt, from the base prompt ``{prompt}`` and ``{answers}`` (the default keeps the base prompt)."""
    demo_noise: float = Field(0.5, ge=0.0, le=1.0)
    """Chance that a demonstration's answer after the first is a near miss of the base demonstration."""

    _base: Task = PrivateAttr(default=None)

    def __init__(self, **knobs: object):
        super().__init__(**knobs)
        self._base = build_task(self.base)
        if self._base.answer_marker is not None:
            raise ConfigError(f"task answer_sets: base task {self._base.name!r} gives its answer after the marker "
                              f"{self._base.answer_marker!r}; expected a base whose whole completion is the answer")

    @property
    def default_rewards(self) -> list[RewardSpec]:
        return self._base.default_rewards

    @property
    def max_completion_chars(self) -> int:
        return self.answers * self._base.max_completion_chars + (self.answers - 1) * len(self.separator)

    def asked(self, example: Example) -> Example:
        return reprompt(example, self.template, answers=str(self.answers))

    def sample(self, rng: random.Random) -> Example:
        return self.asked(self._base.sample(rng))

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        return [self.asked(e) for e in self._base.examples(split, n, seed)]

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        return [self.asked(e) for e in self._base.warm_start_examples(n, seed)]

    def demonstration(self, example: Example) -> str:
        demo = self._base.demonstration(example)
        rng = random.Random(zlib.crc32(example.prompt.encode()))
        slots = [demo] + [near_miss(demo, rng) if rng.random() < self.demo_noise else demo
                          for _ in range(self.answers - 1)]
        return self.separator.join(slots)

    def answer_set(self, completion: str) -> list[str]:
        return split_answers(completion, self.separator, self.answers)

    def verify(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        sets = [self.answer_set(c) for c in completions]
        rows = [i for i, answers in enumerate(sets) for _ in answers]
        verdicts = self._base.verify([a for answers in sets for a in answers], [examples[i] for i in rows])
        out = [False] * len(completions)
        for i, ok in zip(rows, verdicts):
            out[i] = out[i] or ok
        return out

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.verify([completion], [example])[0]

    def task_rewards(self) -> dict[str, RewardFn]:
        names = (set(self._base.task_rewards()) | set(REWARDS.names())) - {"correct"}
        fns = {name: resolve_reward(self._base, name) for name in names}
        shadowed = {name: self.best_of(fn) for name, fn in fns.items() if not inspect.iscoroutinefunction(fn)}
        return {**shadowed, **super().task_rewards()}

    def reward_maxima(self) -> dict[str, float]:
        return {**self._base.reward_maxima(), "correct": 1.0}

    def best_of(self, fn: RewardFn) -> RewardFn:
        """``fn`` scoring each completion by its best answer: every answer scored as a completion of its row (the
        row's columns repeated; ``completion_ids`` left out, as the answers have none), the maximum kept."""

        def best(prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
            sets = [self.answer_set(t) for t in completion_texts(completions)]
            rows = [i for i, answers in enumerate(sets) for _ in answers]
            kwargs.pop("completion_ids", None)
            per_row = {k: [v[i] for i in rows] if (k == "answer" or k not in RESERVED_COLUMNS) and
                       isinstance(v, (list, tuple)) and len(v) == len(sets) else v for k, v in kwargs.items()}
            answers = [a for s in sets for a in s]
            values = fn(prompts=[prompts[i] for i in rows], completions=answers, **per_row) if answers else []
            out: list[float | None] = [None if answers else 0.0 for answers in sets]
            for i, v in zip(rows, values):
                if v is not None:
                    out[i] = v if out[i] is None else max(out[i], v)
            return out

        best.max_value = getattr(fn, "max_value", math.inf)
        best.__qualname__ = f"best answer of {getattr(fn, '__qualname__', fn)}"
        return best
