"""The ``cort`` recipe on rubric data: a jsonl task whose rows carry a ``rubric`` column trains; without the
column and without a default rubric the run stops with an error naming the missing column."""
import json
import random

import pytest

from polo.core.registry import ConfigError
from polo.train.config import load_recipe
from polo.train.trainer import Trainer


def rubric_rows(path, with_rubric=True):
    rng = random.Random(0)
    with path.open("w") as out:
        for _ in range(300):
            a, b = rng.randrange(100), rng.randrange(100)
            row = {"prompt": f"{a}+{b}=", "answer": str(a + b)}
            if with_rubric:
                row["rubric"] = "Exact sum, digits only." if a % 2 else "The answer is a number."
            out.write(json.dumps(row) + "\n")
    return str(path)


def test_cort_trains_on_a_rubric_column(tiny, tmp_path):
    task = f"task={{name: jsonl, path: {rubric_rows(tmp_path / 'rubrics.jsonl')}, verifier: exact}}"
    rows = Trainer(load_recipe("cort", [*tiny, task, "credit.default_rubric=null", "credit.warmup_end=1"]),
                   tmp_path / "run", log=lambda *_: None).run()
    trained = [r for r in rows if r["step"] >= 2]
    assert trained and all(r["credit/max"] > 1.0 > r["credit/min"] for r in trained)  # weights act after warm-up


def test_cort_without_a_rubric_names_the_column(tiny, tmp_path):
    task = f"task={{name: jsonl, path: {rubric_rows(tmp_path / 'plain.jsonl', with_rubric=False)}}}"
    trainer = Trainer(load_recipe("cort", [*tiny, task, "credit.default_rubric=null"]), tmp_path / "run",
                      log=lambda *_: None)
    with pytest.raises(ConfigError, match="'rubric' column"):
        trainer.run()
