"""``jsonl``: a user task read from a JSON-lines file.

Config: ``{"name": "jsonl", "path": "data.jsonl", "verifier": "exact", "test_fraction": 0.1}``. Each
non-blank line is an object with ``prompt`` (str), ``answer`` (str or number) and any extra columns
(the same in every row); the extra columns become ``Example.columns`` and reach every reward function
as keyword lists. ``verifier`` decides ``is_correct`` (and so the ``correct`` reward): ``exact``
(``exact_match``), ``numeric`` (``numeric_match``), ``contains`` (``contains_answer``) or the name of
any registered reward, correct when it returns at least 1.0. The split is by hash of the prompt;
``examples`` cycles through seeded shuffles of the split's rows. The demonstration is the answer.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from pydantic import PrivateAttr, field_validator

from polo.core.registry import ConfigError
from polo.tasks.base import Example, Split, Task, check_split, split_of
from polo.tasks.registry import register_task
from polo.tasks.rewards import REWARDS, RESERVED_COLUMNS, batch_columns, get_reward

VERIFIERS = {"exact": "exact_match", "numeric": "numeric_match", "contains": "contains_answer"}


def _example(row: object, where: str, keys: set[str] | None) -> Example:
    """One parsed line as an Example; ``keys`` are the extra columns of the first row."""
    if not isinstance(row, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in ("prompt", "answer"):
        if key not in row:
            raise ConfigError(f"{where}: missing field {key!r}")
    prompt, answer = row["prompt"], row["answer"]
    if not isinstance(prompt, str):
        raise ConfigError(f"{where}: field 'prompt' must be a string, got {prompt!r}")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise ConfigError(f"{where}: field 'answer' must be a string or a number, got {answer!r}")
    columns = {k: v for k, v in row.items() if k not in ("prompt", "answer")}
    if set(columns) & RESERVED_COLUMNS:
        raise ConfigError(f"{where}: column names {sorted(set(columns) & RESERVED_COLUMNS)} are reserved")
    if keys is not None and set(columns) != keys:
        raise ConfigError(f"{where}: columns {sorted(columns)} differ from the first row's {sorted(keys)}")
    return Example(prompt, str(answer), columns)


MAX_ROW_BYTES = 1_000_000
"""A JSONL row larger than this is refused (a prompt and answer of a verifiable task are far smaller)."""


def read_jsonl(path: Path) -> list[Example]:
    """The examples of a JSONL file; errors name the file and line."""
    if not path.is_file():
        raise ConfigError(f"task.path: no such file {str(path)!r}")
    rows: list[Example] = []
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, 1):
            if len(raw) > MAX_ROW_BYTES:
                raise ConfigError(f"{path}:{number}: a row of {len(raw):,} bytes; rows are limited to "
                                  f"{MAX_ROW_BYTES:,} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ConfigError(f"{path}:{number}: not UTF-8 (byte {err.start} of the row)") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{path}:{number}: invalid JSON ({err.msg})") from None
            rows.append(_example(row, f"{path}:{number}", set(rows[0].columns) if rows else None))
    if not rows:
        raise ConfigError(f"task.path: {str(path)!r} has no rows")
    return rows


@register_task("jsonl")
class Jsonl(Task):
    """Prompts and answers from a JSONL file, verified by a named verifier."""

    path: str
    verifier: str = "exact"
    _rows: list[Example] = PrivateAttr(default_factory=list)

    @field_validator("verifier")
    @classmethod
    def _known_verifier(cls, value: str) -> str:
        if value not in VERIFIERS and value not in REWARDS:
            raise ValueError(
                f"unknown verifier {value!r}; valid: {', '.join(VERIFIERS)} or a registered reward "
                f"({', '.join(REWARDS.names())})"
            )
        return value

    def __init__(self, **knobs: object):
        super().__init__(**knobs)
        self._rows = read_jsonl(Path(self.path))  # after validation, so its errors are not rewrapped

    @property
    def max_completion_chars(self) -> int:
        return max(len(ex.answer) for ex in self._rows)

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        check_split(split)
        rows = [ex for ex in self._rows if split_of(ex.prompt, self.test_fraction) == split]
        if not rows:
            raise ValueError(
                f"{self.path}: no {split} rows ({len(self._rows)} rows, test_fraction={self.test_fraction})"
            )
        rng, out = random.Random(seed), []
        while len(out) < n:
            out.extend(rng.sample(rows, len(rows)))
        return out[:n]

    def is_correct(self, completion: str, example: Example) -> bool:
        fn = get_reward(VERIFIERS.get(self.verifier, self.verifier))
        return fn(prompts=[example.prompt], completions=[completion], **batch_columns([example]))[0] >= 1.0
