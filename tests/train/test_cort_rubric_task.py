"""The ``cort`` recipe on rubric data: a jsonl task whose rows carry a ``rubric`` column trains; without the
column and without a default rubric the run is refused before it starts with an error naming the missing column; at
the shipped settings on the built-in task the weights deviate from 1 by the stated amounts."""
import json
import random

import pytest

from polo.core.credit.cort import smoothstep
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
    with pytest.raises(ConfigError, match="'rubric' column"):  # before the warm start: the context check renders them
        Trainer(load_recipe("cort", [*tiny, task, "credit.default_rubric=null"]), tmp_path / "run", log=lambda *_: None)


def test_cort_weights_deviate_at_the_shipped_settings(tiny, tmp_path):
    """The shipped recipe on built-in addition (seed 0, TINY sizes, 3 steps): the weights once warmed up move the
    advantages by more than 5 % on average (mean |w - 1|, cort/target_spread), and step k applies the SmoothStep
    share s(k - 1) of that (k - 1 steps completed before it: cort/spread = s(k - 1) * cort/target_spread, > 0 from the
    second step). The built-in model never read a rubric: this is its reaction to the rubric's text, which restates
    the task (docs/distillation.md)."""
    trainer = Trainer(load_recipe("cort", tiny), tmp_path / "run", log=lambda *_: None)
    rows = [r for r in trainer.run() if r["step"] >= 1]
    assert len(rows) == 3 and all(r["cort/target_spread"] > 0.05 for r in rows)
    for r in rows:
        share = smoothstep(r["step"] - 1, 0, 50)  # the shipped warm-up, 0 -> 50 steps
        # w_eff - 1 comes back from 1 + s(w - 1) in float32: a few ulps of 1 (~1e-7) per token
        assert r["cort/spread"] == pytest.approx(share * r["cort/target_spread"], rel=0, abs=1e-6)
    assert rows[-1]["cort/spread"] > 0
