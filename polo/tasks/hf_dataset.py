"""``dataset``: a task read with Hugging Face ``datasets`` from local data (never the Hub).

Config: ``{"name": "dataset", "path": "train.parquet", "prompt_column": "question", "answer_column":
"solution"}``. ``path`` is a local ``.jsonl``/``.json``, ``.parquet`` or ``.csv`` file, or a ``save_to_disk``
folder (a DatasetDict's ``split`` is the training split); anything else, a Hub name included, is refused.
A relative ``path`` is made absolute when validated. The split is by prompt hash (``test_fraction``), or
``test_split`` names the DatasetDict split held out.

A prompt is a string or a list of ``{"role", "content"}`` messages; ``system_prompt`` prepends a system
message. An example with messages is conversational (``Example.messages``; see ``polo.tasks.base``); its
``prompt`` text joins the contents with newlines. Every other column reaches the rewards, as with ``jsonl``.

``answer_column`` may be None: the task then has no verifier (``verifier`` may still name a registered
reward), so no ``correct`` reward and no default rewards (the recipe's ``rewards`` score it), accuracy
metrics read 0, ``rollout.max_new_tokens`` must be set, and the built-in model cannot be warm-started
(set ``model.path``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import PrivateAttr, field_validator, model_validator

from polo.core.registry import ConfigError
from polo.tasks.base import Example, Split, Task
from polo.tasks.jsonl import VERIFIERS, answer_text, check_columns, check_verifier, cycle_split, verify
from polo.tasks.paths import DataPath
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, RewardSpec

READERS = {".jsonl": "from_json", ".json": "from_json", ".parquet": "from_parquet", ".csv": "from_csv"}
"""File suffix → ``datasets.Dataset`` constructor."""


def import_datasets():
    """The ``datasets`` module, or a ConfigError telling how to install it."""
    try:
        import datasets
    except ImportError:
        raise ConfigError("task dataset needs the datasets library: pip install 'polo[data]' "
                          "(or pip install datasets)") from None
    return datasets


def read_table(path: Path, split: str):
    """Split ``split`` of a local file (its only split) or ``save_to_disk`` folder, as a ``datasets.Dataset``."""
    if not path.exists():
        raise ConfigError(f"task.path: no local file or folder {str(path)!r}; the dataset task reads only local "
                          f"{', '.join(READERS)} files or save_to_disk folders, never the Hugging Face Hub")
    reader = "load_from_disk" if path.is_dir() else READERS.get(path.suffix.lower())
    if reader is None:
        raise ConfigError(f"task.path: {str(path)!r} is not a {', '.join(READERS)} file nor a save_to_disk folder")
    datasets = import_datasets()
    try:
        table = datasets.load_from_disk(str(path)) if path.is_dir() else getattr(datasets.Dataset, reader)(str(path))
    except Exception as err:  # datasets and pyarrow raise many types for unreadable data
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ConfigError(f"task.path: {str(path)!r} cannot be read ({type(err).__name__}: {first})") from None
    if isinstance(table, datasets.DatasetDict):
        if split not in table:
            raise ConfigError(f"task: {str(path)!r} has no split {split!r}; its splits: {', '.join(table)}")
        return table[split]
    if split != "train":
        raise ConfigError(f"task: {str(path)!r} holds one split, read as 'train'; split={split!r} needs a "
                          f"save_to_disk folder of a DatasetDict")
    return table


def join_messages(messages: tuple[dict[str, str], ...]) -> str:
    """The plain-text prompt of a conversation: its contents joined by newlines (roles dropped)."""
    return "\n".join(m["content"] for m in messages)


def as_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """A prompt cell that is a list of ``{"role", "content"}`` messages, checked."""
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value):
        return tuple({"role": m["role"], "content": m["content"]} for m in value)
    raise ConfigError(f"{where}: a prompt must be a string or a non-empty list of {{'role': str, 'content': str}} "
                      f"messages, got {str(value)[:80]!r}")


@register_task("dataset")
class HfDataset(Task):
    """Prompts (text or chat messages) and optional answers read with ``datasets`` from local data."""

    path: DataPath
    prompt_column: str = "prompt"
    answer_column: str | None = "answer"
    """None: no answers (rewards come from the recipe)."""
    split: str = "train"
    test_split: str | None = None
    """A save_to_disk DatasetDict split held out; None: ``test_fraction`` of the rows by prompt hash."""
    system_prompt: str | None = None
    verifier: str | None = None
    """As jsonl's; None: ``exact`` with an answer column, no verifier without."""
    _rows: dict[str, list[Example]] = PrivateAttr(default_factory=dict)

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str | None) -> str | None:
        return None if value is None else check_verifier(value)

    @model_validator(mode="after")
    def _verifier_has_answers(self) -> "HfDataset":
        if self.answer_column is None and self.verifier in VERIFIERS:
            raise ValueError(f"verifier {self.verifier!r} compares with the answer, and answer_column is None: "
                             f"set answer_column, or name a registered reward as the verifier")
        return self

    def __init__(self, **knobs: object):
        super().__init__(**knobs)
        splits = {"train": self.split, **({"test": self.test_split} if self.test_split else {})}
        self._rows = {name: self._read(split) for name, split in splits.items()}

    def _read(self, split: str) -> list[Example]:
        table = read_table(Path(self.path), split)
        where = f"{self.path} ({split})"
        for knob in ("prompt_column", "answer_column"):
            column = getattr(self, knob)
            if column is not None and column not in table.column_names:
                raise ConfigError(f"task.{knob}: {where} has no column {column!r}; its columns: "
                                  f"{', '.join(table.column_names)}")
        if len(table) == 0:
            raise ConfigError(f"task.path: {where} has no rows")
        keys = set(table.column_names) - {self.prompt_column, self.answer_column}
        check_columns(dict.fromkeys(keys), where, None)
        return [self._example(row, f"{where} row {i}") for i, row in enumerate(table)]

    def _example(self, row: dict[str, Any], where: str) -> Example:
        prompt = row[self.prompt_column]
        answer = "" if self.answer_column is None else answer_text(row[self.answer_column], where, self.answer_column)
        columns = {k: v for k, v in row.items() if k not in (self.prompt_column, self.answer_column)}
        if isinstance(prompt, str) and self.system_prompt is None:
            return Example(prompt, answer, columns)
        turns = ({"role": "user", "content": prompt},) if isinstance(prompt, str) else as_messages(prompt, where)
        system = ({"role": "system", "content": self.system_prompt},) if self.system_prompt is not None else ()
        messages = system + turns
        return Example(join_messages(messages), answer, columns, messages)

    @property
    def checker(self) -> str | None:
        """The verifier in use: ``verifier``, else ``exact`` when there are answers, else None."""
        return self.verifier or ("exact" if self.answer_column is not None else None)

    @property
    def default_rewards(self) -> list[RewardSpec]:
        if self.checker is None:
            raise ConfigError("task dataset has no answer_column and no verifier, so no default reward: name the "
                              "recipe's rewards (rewards=[{name: REWARD, weight: 1.0}])")
        return [RewardSpec("correct", 1.0)]

    @property
    def max_completion_chars(self) -> int:
        if self.answer_column is None:
            raise ConfigError("task dataset has no answer_column, so no bound on the completion length: set "
                              "rollout.max_new_tokens")
        return max(len(ex.answer) for rows in self._rows.values() for ex in rows)

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        if self.test_split is None:
            return cycle_split(self._rows["train"], split, n, seed, self.test_fraction, self.path)
        return cycle_split(self._rows.get(split, []), split, n, seed, None, f"{self.path} ({split})")

    def demonstration(self, example: Example) -> str:
        if self.answer_column is None:
            raise ConfigError("task dataset has no answer_column: the built-in model's warm start trains on "
                              "answers; set model.path to a checkpoint (or give answer_column)")
        return example.answer

    def is_correct(self, completion: str, example: Example) -> bool:
        """The verifier's judgement; always False without one (accuracy metrics then read 0)."""
        return self.checker is not None and verify(self.checker, completion, example)

    def task_rewards(self) -> dict[str, RewardFn]:
        return super().task_rewards() if self.checker else {}

    def reward_maxima(self) -> dict[str, float]:
        return super().reward_maxima() if self.checker else {}
