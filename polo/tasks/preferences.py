"""``preference_pairs``: prompts with a preferred (``chosen``) and a dispreferred (``rejected``) response.

Config: ``{"name": "preference_pairs", "path": "pairs.jsonl", "verifier": "addition"}``. ``path`` is a JSONL
file (read here, like the ``jsonl`` task) or any file or ``save_to_disk`` folder the ``dataset`` task reads
(with the optional ``datasets`` library; ``split`` picks a DatasetDict's split); default: the packaged example,
addition pairs built by ``polo pairs addition`` from the warm-started built-in model. Each row holds
``prompt`` (a string or chat messages), ``chosen`` and ``rejected`` (strings, or numbers read as text),
optionally ``chosen_score`` and ``rejected_score`` (numbers), ``answer`` and any extra columns (the same in every
row). An example carries
``chosen``, ``rejected`` (and the scores) in ``Example.columns``, so every reward sees them.

``verifier`` decides ``is_correct``, and so the held-out greedy accuracy of a run:

- a registered task (``addition``, or ``{name: addition, digits: 3}``): that task's verifier. Its own test
  split is the held-out set (a DPO run is measured on the real task), the file's rows whose prompts fall in
  that test split (by prompt hash, the base task's ``test_fraction``) are left out of training, and the warm
  start is the base task's (the same demonstrations, so the same model as a run on the base task).
- ``exact``, ``numeric``, ``contains`` (these need ``answer``) or a registered reward, as the ``jsonl`` task's.
- None: ``exact`` when every row has an answer, else no verifier (accuracy reads 0).

Rewards: the verifier's ``correct`` (with the base task's default rewards when there is one), and
``preferred`` (``chosen_score``, default 1.0, for a completion equal to the chosen text; ``rejected_score``,
default 0.0, for the rejected text; None for any other), the default without a verifier.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import PrivateAttr, field_validator

from polo.core.registry import ConfigError
from polo.tasks.base import Example, Split, Task, split_of
from polo.tasks.hf_dataset import as_messages, join_messages, read_table
from polo.tasks.jsonl import VERIFIERS, answer_text, check_columns, check_verifier, cycle_split, jsonl_rows, verify
from polo.tasks.paths import DataPath
from polo.tasks.registry import TASKS, build_task, register_task
from polo.tasks.rewards import RewardFn, RewardSpec, completion_texts

EXAMPLE_PAIRS = Path(__file__).resolve().parent / "data" / "addition_pairs.jsonl"
"""The packaged example: addition pairs (a correct and an incorrect completion of the warm-started model)."""
PAIR_FIELDS = ("prompt", "chosen", "rejected")
SCORE_FIELDS = ("chosen_score", "rejected_score")


def is_task_config(value: Any) -> bool:
    """Whether ``value`` names a registered task (a name or ``{name: ..., knobs}``)."""
    name = value.get("name") if isinstance(value, dict) else value
    return isinstance(name, str) and name in TASKS


def read_pair_rows(path: Path, split: str) -> list[tuple[object, str]]:
    """The rows of a JSONL file, or of a file or folder ``datasets`` reads, each with its location."""
    if path.suffix.lower() == ".jsonl":
        return jsonl_rows(path)
    return [(dict(row), f"{path} ({split}) row {i}") for i, row in enumerate(read_table(path, split))]


def pair_example(row: object, where: str, keys: set[str] | None) -> Example:
    """One row as an Example; ``keys`` are the first row's columns (every row must have the same)."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in PAIR_FIELDS:
        if key not in row:
            raise ConfigError(f"{where}: missing field {key!r} (a pair needs {', '.join(PAIR_FIELDS)})")
    for key in SCORE_FIELDS:
        if key in row and (isinstance(row[key], bool) or not isinstance(row[key], (int, float))):
            raise ConfigError(f"{where}: field {key!r} must be a number, got {row[key]!r}")
    columns = {k: v for k, v in row.items() if k not in ("prompt", "answer")}
    check_columns(columns, where, keys)
    columns.update({key: answer_text(row[key], where, key) for key in ("chosen", "rejected")})
    answer = answer_text(row["answer"], where) if "answer" in row else ""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return Example(prompt, answer, columns)
    messages = as_messages(prompt, where)
    return Example(join_messages(messages), answer, columns, messages)


def read_pairs(path: str | Path) -> list[Example]:
    """The pairs of a JSONL file (or a file ``datasets`` reads) as Examples with ``chosen`` and ``rejected`` (and
    any ``chosen_score``, ``rejected_score``, ``user_rubric``, ``domain``, ``id``) in their columns."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"pairs file {str(path)!r} does not exist")
    pairs: list[Example] = []
    for row, where in read_pair_rows(path, "train"):
        pairs.append(pair_example(row, where, set(pairs[0].columns) if pairs else None))
    return pairs


RUBRIC_TEMPLATE = "User preferences:\n{rubric}\n\n{prompt}"
"""How a pair's ``user_rubric`` is put ahead of its prompt (``{rubric}``, ``{prompt}``), for ``polo rm`` and
``polo rm-eval`` alike."""


def condition(template: str, rubric: str | None, prompt: str) -> str:
    """The prompt a scorer reads: ``template`` filled with the rubric and the prompt, the prompt alone without a
    rubric."""
    return template.format(rubric=rubric, prompt=prompt) if rubric else prompt


def check_template(template: str) -> str:
    """``template`` if it fills with exactly ``{rubric}`` and ``{prompt}``, else a ConfigError."""
    try:
        filled = template.format(rubric="\0R", prompt="\0P")
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"rubric template {template!r}: only the fields {{rubric}} and {{prompt}} may appear "
                          f"(double other braces), got {type(err).__name__}: {err}") from None
    if "\0R" not in filled or "\0P" not in filled:
        raise ConfigError(f"rubric template {template!r} must contain both {{rubric}} and {{prompt}}")
    return template


def rubric_conditioned(pairs: list[Example], template: str = RUBRIC_TEMPLATE) -> list[Example]:
    """The pairs with each prompt conditioned on its ``user_rubric`` (``condition``); pairs without one as they are."""
    return [replace(e, prompt=condition(template, e.columns.get("user_rubric"), e.prompt)) for e in pairs]


def responses(pairs: list[Example]) -> tuple[list[str], list[str]]:
    """The chosen and the rejected response of each pair."""
    return [e.columns["chosen"] for e in pairs], [e.columns["rejected"] for e in pairs]


def score_gaps(pairs: list[Example]) -> list[float]:
    """``chosen_score − rejected_score`` of each pair, 0.0 for a pair without both scores."""
    return [float(e.columns["chosen_score"]) - float(e.columns["rejected_score"])
            if all(k in e.columns for k in SCORE_FIELDS) else 0.0 for e in pairs]


@register_task("preference_pairs")
class PreferencePairs(Task):
    """Prompts with a chosen and a rejected response (DPO, IPO, OPPO), from a file; verified by a base task
    or a named verifier."""

    path: DataPath | None = None
    """JSONL file, or a file / save_to_disk folder read with ``datasets``; None: the packaged addition pairs
    (polo/tasks/data/addition_pairs.jsonl)."""
    verifier: str | dict[str, Any] | None = None
    """A registered task (name or ``{name, knobs}``: its verifier, test split and warm start), a verifier
    (``exact``, ``numeric``, ``contains``, a registered reward), or None (``exact`` when rows have answers)."""
    split: str = "train"
    """The split read from a DatasetDict folder."""

    _rows: list[Example] = PrivateAttr(default_factory=list)
    _base: Task | None = PrivateAttr(default=None)
    _has_answers: bool = PrivateAttr(default=False)

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str | dict | None) -> str | dict | None:
        if value is None or is_task_config(value):
            return value
        if isinstance(value, dict):
            raise ValueError(f"a mapping must name a registered task ({', '.join(TASKS.names())}), got {value!r}")
        return check_verifier(value)

    @property
    def pairs_path(self) -> Path:
        """The pair file read: ``path``, or the packaged example."""
        return Path(self.path) if self.path is not None else EXAMPLE_PAIRS

    def __init__(self, **knobs: object):
        super().__init__(**knobs)
        rows: list[Example] = []
        for row, where in read_pair_rows(self.pairs_path, self.split):
            rows.append(pair_example(row, where, set(rows[0].columns) if rows else None))
        self._rows = rows
        self._has_answers = all(e.answer != "" for e in rows)
        if is_task_config(self.verifier):
            self._base = build_task(self.verifier)
        if (self._base is not None or self.verifier in VERIFIERS) and not self._has_answers:
            raise ConfigError(f"task preference_pairs: verifier {self.verifier!r} compares completions with the "
                              f"answer, and some rows of {self.pairs_path} have no 'answer'")

    @property
    def checker(self) -> str | None:
        """The named verifier in use (without a base task): ``verifier``, else ``exact`` when rows have answers."""
        if self._base is not None:
            return None
        return self.verifier or ("exact" if self._has_answers else None)

    @property
    def max_completion_chars(self) -> int:
        if self._base is not None:
            return self._base.max_completion_chars
        return max(len(text) for e in self._rows for text in (e.answer, e.columns["chosen"], e.columns["rejected"]))

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        if self._base is None:
            return cycle_split(self._rows, split, n, seed, self.test_fraction, str(self.pairs_path))
        if split == "test":
            return self._base.examples("test", n, seed)
        train = [e for e in self._rows if split_of(e.prompt, self._base.test_fraction) == "train"]
        return cycle_split(train, "train", n, seed, None,
                           f"{self.pairs_path} (rows outside the base task's test split)")

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        if self._base is not None:
            return self._base.warm_start_examples(n, seed)
        return self.examples("train", n, seed)

    def demonstration(self, example: Example) -> str:
        """The chosen response (the usual supervised stage before DPO); the base task's for its own examples."""
        if "chosen" in example.columns or self._base is None:
            return example.columns["chosen"]
        return self._base.demonstration(example)

    def is_correct(self, completion: str, example: Example) -> bool:
        if self._base is not None:
            return self._base.is_correct(completion, example)
        return self.checker is not None and verify(self.checker, completion, example)

    @property
    def default_rewards(self) -> list[RewardSpec]:
        if self._base is not None:
            return self._base.default_rewards
        return [RewardSpec("correct" if self.verified else "preferred", 1.0)]

    @property
    def verified(self) -> bool:
        """Whether completions can be verified (a base task or a named verifier)."""
        return self._base is not None or self.checker is not None

    def task_rewards(self) -> dict[str, RewardFn]:
        rewards = {**(self._base.task_rewards() if self._base is not None else {}), "preferred": self.preferred_reward}
        return {**rewards, "correct": self.correct_reward} if self.verified else rewards

    def reward_maxima(self) -> dict[str, float]:
        preferred = max(max(float(e.columns.get("chosen_score", 1.0)), float(e.columns.get("rejected_score", 0.0)))
                        for e in self._rows)
        maxima = {**(self._base.reward_maxima() if self._base is not None else {}), "preferred": preferred}
        return {**maxima, "correct": 1.0} if self.verified else maxima

    def preferred_reward(self, prompts, completions, chosen, rejected, chosen_score=None, rejected_score=None,
                         **kwargs) -> list[float | None]:
        """Reward ``preferred``: the chosen score (default 1.0) for the chosen text, the rejected score (default
        0.0) for the rejected text, None for any other completion."""
        high = chosen_score or [1.0] * len(chosen)
        low = rejected_score or [0.0] * len(rejected)
        out: list[float | None] = []
        for text, c, r, hi, lo in zip(completion_texts(completions), chosen, rejected, high, low):
            text = text.strip()
            out.append(float(hi) if text == c.strip() else float(lo) if text == r.strip() else None)
        return out
