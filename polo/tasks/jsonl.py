"""``jsonl``: a user task read from a JSON-lines file.

Config: ``{"name": "jsonl", "path": "data.jsonl", "verifier": "exact", "test_fraction": 0.1}``. Each
non-blank line is an object with ``prompt`` (str), ``answer`` (str or number) and any extra columns
(the same in every row); the extra columns become ``Example.columns`` and reach every reward function
as keyword lists. A relative ``path`` is made absolute (against the working directory) when validated.
``verifier`` decides ``is_correct`` (and so the ``correct`` reward): ``exact`` (``exact_match``),
``numeric`` (``numeric_match``), ``contains`` (``contains_answer``) or the name of any registered reward,
correct when it returns at least 1.0. The split is by hash of the prompt;
``examples`` cycles through seeded shuffles of the split's rows. The demonstration is the answer.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import PrivateAttr, field_validator

from polo.core.registry import ConfigError
from polo.tasks.base import Example, Split, Task, check_split, split_of
from polo.tasks.paths import DataPath
from polo.tasks.registry import register_task
from polo.tasks.rewards import REWARDS, RESERVED_COLUMNS, batch_columns, get_reward

VERIFIERS = {"exact": "exact_match", "numeric": "numeric_match", "contains": "contains_answer"}


def check_verifier(value: str) -> str:
    """``value`` if it names a verifier (``exact``, ``numeric``, ``contains`` or a registered reward)."""
    if value not in VERIFIERS and value not in REWARDS:
        raise ValueError(f"unknown verifier {value!r}; valid: {', '.join(VERIFIERS)} or a registered reward "
                         f"({', '.join(REWARDS.names())})")
    return value


def verify(verifier: str, completion: str, example: Example) -> bool:
    """Whether the reward named by ``verifier`` gives ``completion`` at least 1.0."""
    fn = get_reward(VERIFIERS.get(verifier, verifier))
    return fn(prompts=[example.prompt], completions=[completion], **batch_columns([example]))[0] >= 1.0


def answer_text(answer: object, where: str, key: str = "answer") -> str:
    """A row's answer (a string or a number) as text."""
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise ConfigError(f"{where}: field {key!r} must be a string or a number, got {answer!r}")
    return str(answer)


def check_columns(columns: dict, where: str, keys: set[str] | None) -> None:
    """Refuse reserved extra column names and extra columns other than ``keys`` (the first row's)."""
    if set(columns) & RESERVED_COLUMNS:
        raise ConfigError(f"{where}: column names {sorted(set(columns) & RESERVED_COLUMNS)} are reserved")
    if keys is not None and set(columns) != keys:
        raise ConfigError(f"{where}: columns {sorted(columns)} differ from the first row's {sorted(keys)}")


def _example(row: object, where: str, keys: set[str] | None) -> Example:
    """One parsed line as an Example; ``keys`` are the extra columns of the first row."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("prompt", "answer"):
        if key not in row:
            raise ConfigError(f"{where}: missing field {key!r}")
    prompt = row["prompt"]
    if not isinstance(prompt, str):
        raise ConfigError(f"{where}: field 'prompt' must be a string, got {prompt!r}")
    columns = {k: v for k, v in row.items() if k not in ("prompt", "answer")}
    check_columns(columns, where, keys)
    return Example(prompt, answer_text(row["answer"], where), columns)


def cycle_split(rows: list[Example], split: Split, n: int, seed: int, test_fraction: float | None,
                where: str) -> list[Example]:
    """``n`` examples cycling through seeded shuffles of the ``split`` rows (by prompt hash; all rows when
    ``test_fraction`` is None: they are the split already)."""
    check_split(split)
    chosen = rows if test_fraction is None else [ex for ex in rows
                                                 if split_of(ex.prompt, test_fraction) == split]
    if not chosen:
        raise ValueError(f"{where}: no {split} rows ({len(rows)} rows, test_fraction={test_fraction})")
    rng, out = random.Random(seed), []
    while len(out) < n:
        out.extend(rng.sample(chosen, len(chosen)))
    return out[:n]


DATASET_HINT = "for parquet, CSV or JSON files use task.name=dataset"
MAX_ROW_BYTES = 1_000_000
"""A JSONL row larger than this is refused (a prompt and answer of a verifiable task are far smaller)."""


def jsonl_rows(path: Path) -> list[tuple[object, str]]:
    """Each non-blank line of a JSONL file parsed, with its ``file:line`` for error messages; errors name the
    file and line."""
    if not path.is_file():
        raise ConfigError(f"task.path: no such file {str(path)!r}")
    rows: list[tuple[object, str]] = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if len(raw) > MAX_ROW_BYTES:
                raise ConfigError(f"{path}:{number}: a row of {len(raw):,} bytes; rows are limited to "
                                  f"{MAX_ROW_BYTES:,} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ConfigError(f"{path}:{number}: not UTF-8 (byte {err.start} of the row); {DATASET_HINT}") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                hint = f"; {DATASET_HINT}" if path.suffix.lower() in (".csv", ".tsv", ".parquet", ".arrow") else ""
                raise ConfigError(f"{path}:{number}: invalid JSON ({err.msg}){hint}") from None
            rows.append((row, f"{path}:{number}"))
    if not rows:
        raise ConfigError(f"task.path: {str(path)!r} has no rows")
    return rows


def read_jsonl(path: Path) -> list[Example]:
    """The examples of a JSONL file; errors name the file and line."""
    examples: list[Example] = []
    for row, where in jsonl_rows(path):
        examples.append(_example(row, where, set(examples[0].columns) if examples else None))
    return examples


@register_task("jsonl")
class Jsonl(Task):
    """Prompts and answers from a JSONL file, verified by a named verifier."""

    path: DataPath
    verifier: str = "exact"
    _rows: list[Example] = PrivateAttr(default_factory=list)

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str) -> str:
        return check_verifier(value)

    def __init__(self, **knobs: object):
        super().__init__(**knobs)
        self._rows = read_jsonl(Path(self.path))  # after validation, so its errors are not rewrapped

    @property
    def max_completion_chars(self) -> int:
        return max(len(ex.answer) for ex in self._rows)

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        return cycle_split(self._rows, split, n, seed, self.test_fraction, self.path)

    def is_correct(self, completion: str, example: Example) -> bool:
        return verify(self.verifier, completion, example)
