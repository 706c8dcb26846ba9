"""Examples and the Task base class: seeded generation, a hash-based train/test split, verification.

A task is a pydantic model whose fields are its knobs (``digits``, ``count``, ...), so configs are
validated with the offending key named. A generated task implements ``sample(rng)``; ``examples`` keeps
the samples whose prompt hashes into the requested split, so the train and test splits are disjoint
for every seed. ``is_correct`` defaults to an exact match of the stripped completion and answer, and
``demonstration`` to the answer. The task's own reward ``correct`` is 1.0 iff ``is_correct``.
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Literal

from pydantic import Field

from polo.core.registry import Component
from polo.tasks.rewards import RESERVED_COLUMNS, RewardFn, RewardSpec, completion_texts, exact

Split = Literal["train", "test"]


@dataclass(frozen=True)
class Example:
    """One problem: the prompt fed to the model, the reference answer and extra reward columns.

    A conversational example (``messages is not None``) also carries its prompt as chat messages
    (``{"role", "content"}`` dicts): the policy renders them with the chat template when
    ``model.chat_template`` is on, and rewards receive TRL-style conversational completions; ``prompt`` is
    then the messages' contents joined by newlines, the text used otherwise (and for the split hash). ``tools``:
    the JSON schemas of the functions the policy may call, which the chat template renders (transformers'
    ``apply_chat_template(messages, tools=...)``); assistant messages may then carry ``tool_calls``.
    """

    prompt: str
    answer: str
    columns: Mapping[str, Any] = field(default_factory=dict)
    messages: tuple[Mapping[str, Any], ...] | None = None
    tools: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class Tool:
    """A tool the policy calls inside its completion: when the generated text ends with ``trigger``, the reply
    ``respond(text so far)`` is fed to the model as tool tokens (context for the policy, never its actions), and the
    policy goes on after it (``polo.engines.tool_use``)."""

    trigger: str
    respond: Callable[[str], str]


def reprompt(example: Example, template: str, **fields: str) -> Example:
    """``example`` with its prompt rewritten as ``template.format(prompt=..., **fields)``; with chat messages,
    the last message's content is the ``{prompt}`` that is rewritten."""
    messages = example.messages
    if messages:
        last = dict(messages[-1])
        last["content"] = template.format(prompt=last["content"], **fields)
        messages = (*messages[:-1], last)
    return replace(example, prompt=template.format(prompt=example.prompt, **fields), messages=messages)


def split_of(key: str, test_fraction: float) -> Split:
    """``"test"`` for a stable hash fraction of keys below ``test_fraction``, else ``"train"``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") / 2**64 < test_fraction else "train"


def check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


class Task(Component):
    """Base class of tasks; subclasses are registered with ``@register_task(name)``.

    A subclass defines ``max_completion_chars`` (a property or a field): an upper bound on the length of
    a correct completion, used to set ``max_new_tokens``.
    """

    registry_name: ClassVar[str] = ""
    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("correct", 1.0)]
    """Rewards used when a recipe names none."""
    key_defaults: ClassVar[dict[str, Any]] = {}
    """Knobs added after warm starts were cached, with their defaults: left out of the warm-start key while at these
    values, so the cached warm starts of existing recipes keep their keys."""

    test_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    """Fraction of the problem space (by prompt hash) held out as the test split."""

    @property
    def name(self) -> str:
        return type(self).registry_name

    def sample(self, rng: random.Random) -> Example:
        """Draw one problem from the whole problem space (generated tasks implement this)."""
        raise NotImplementedError

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        """The supervised warm start's ``n`` demonstrations (prompt → ``demonstration``): training examples here;
        a task of episodes gives the steps of noisy expert episodes instead."""
        return self.examples("train", n, seed)

    def consistent_demonstrator(self) -> bool:
        """Whether the warm start's demonstrations follow one demonstrator's choices (an answer key, a scripted
        expert), so that the greedy accuracy on held-out ones measures the imitation and ``warm_start.target_accuracy``
        may end it; True here."""
        return True

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        """``n`` examples of ``split``, deterministic given ``seed``; the splits never share a prompt."""
        check_split(split)
        rng, out = random.Random(seed), []
        for _ in range(1000 + 100 * n):
            if len(out) == n:
                break
            example = self.sample(rng)
            if split_of(self.problem_key(example), self.test_fraction) == split:
                out.append(example)
        if len(out) < n:
            raise ValueError(
                f"task {self.name!r}: could not draw {n} {split} examples; the problem space is too "
                f"small for test_fraction={self.test_fraction}"
            )
        return out

    def problem_key(self, example: Example) -> str:
        """The identity of a problem, hashed for the split: its prompt (a task whose prompts repeat over problems,
        e.g. one question about many images, keys by what differs)."""
        return example.prompt

    def demonstration(self, example: Example) -> str:
        """Target completion for the supervised warm start (no EOS)."""
        return example.answer

    def tool(self) -> Tool | None:
        """The tool run during generation (a tool-integrated task's calculator, ...); None: the policy writes the
        whole completion."""
        return None

    def is_correct(self, completion: str, example: Example) -> bool:
        """Whether ``completion`` solves ``example``."""
        return exact(completion, example.answer)

    def verify(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        """``is_correct`` of each completion and its example; a task whose verifier is costly (one that runs
        programs) overrides this to check the batch at once."""
        return [self.is_correct(c, e) for c, e in zip(completions, examples)]

    def correct_reward(
        self, prompts: list[str], completions: list[str], answer: list[str], **columns
    ) -> list[float]:
        """Reward ``correct``: 1.0 iff ``is_correct`` of each completion's text. Keyword arguments that are not
        per-row columns of the examples (``completion_ids``, ``trainer_state``, ...) are ignored."""
        rows = {k: v for k, v in columns.items()
                if k not in RESERVED_COLUMNS and isinstance(v, (list, tuple)) and len(v) == len(completions)}
        out = []
        for i, (prompt, completion, ans) in enumerate(zip(prompts, completion_texts(completions), answer)):
            example = Example(prompt, ans, {k: v[i] for k, v in rows.items()})
            out.append(float(self.is_correct(completion, example)))
        return out

    answer_marker: ClassVar[str | None] = None
    """Text after which a completion gives its final answer (the reasoning span ends there); None: the
    completion is all answer, as in the built-in tasks."""

    def task_rewards(self) -> dict[str, RewardFn]:
        """Rewards defined by this task; they shadow registered rewards of the same name."""
        return {"correct": self.correct_reward}

    def reward_maxima(self) -> dict[str, float]:
        """The largest value of each reward in ``task_rewards`` (a task that adds rewards declares theirs)."""
        return {"correct": 1.0}
