"""Two-step runs of dagrpo, gcpo and vulpo on the built-in model, each estimator fed by its real inputs.

dagrpo reads a reward column as its fine-grained score; gcpo runs on addition with a tag that some
completions match (answers starting with 1), so the tag contrast has both subsets; vulpo runs on a labelled
JSONL task with a three-criterion causal judge (the frozen warm-started policy): the real judge_scores and
prompt_label providers, not stand-ins (``VULPO_TOY`` in tests/conftest.py). The shipped vulpo recipe runs on the built-in
labelled task labelled_addition with a rule judge (tests/train/test_recipes_smoke.py runs it); its criteria order is
checked here.
"""
import json
import math
import socket

import pytest

from conftest import VULPO_TOY
from polo.core.registry import ConfigError
from polo.train.config import load_recipe
from polo.train.trainer import Trainer


def run(recipe, tiny, tmp_path, *overrides):
    rows = Trainer(load_recipe(recipe, [*tiny, "seed=0", "train.steps=2", *overrides]), tmp_path / "run",
                   log=lambda *_: None).run()
    return [row for row in rows if row["step"] > 0]


def test_dagrpo_on_a_reward_column(tiny, tmp_path):
    rows = run("dagrpo", tiny, tmp_path)
    assert len(rows) == 2
    for row in rows:
        # digit_match takes few values on a weak model: many pairs tie (masked), but not all
        assert 0.0 < row["dagrpo/masked_pair_frac"] < 1.0, row
        assert row["dagrpo/unscored"] == 0.0
        # every all-wrong group got one demonstration anchor from the guided engine
        assert row["dagrpo/anchors"] == row["log_metric/guided/groups_rescued"] > 0
        assert math.isfinite(row["loss/policy"])


def test_gcpo_on_addition_with_a_tag_some_completions_use(tiny, tmp_path):
    rows = run("gcpo", tiny, tmp_path, "task.name=addition", "rewards=[{name: correct}]",
               "advantage.format_reward=null", "advantage.tag_pattern=^1", "advantage.l_max=4")
    assert len(rows) == 2
    assert all(0.0 < row["gcpo/tag_rate"] < 1.0 for row in rows), [row["gcpo/tag_rate"] for row in rows]
    assert all(math.isfinite(row["loss/policy"]) for row in rows)


def test_vulpo_with_a_causal_judge_on_labelled_data(tiny, tmp_path):
    rows = run("vulpo", tiny, tmp_path, *VULPO_TOY)
    assert len(rows) == 2
    for row in rows:
        assert row["judge/failures"] == 0.0
        assert 1.0 <= row["vulpo/lambda_vul"] <= 2.0 and 1.0 <= row["vulpo/lambda_safe"] <= 2.0
        assert 0.0 <= row["vulpo/degenerate_frac"] <= 1.0 and row["vulpo/unscored"] == 0.0


def test_shipped_vulpo_recipe_judges_the_three_criteria_in_order():
    recipe = load_recipe("vulpo")
    assert recipe.advantage["name"] == "vulpo" and recipe.roles["judge"]["backend"] == "rule"
    rules = [c["rule"] for c in recipe.roles["judge"]["criteria"]]
    assert [rules[i] for i in recipe.advantage["criteria"]] == ["verdict", "digit_match", "correct"]


def test_labels_other_than_vul_and_safe_stop_the_run(tiny, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{a}+1=", "answer": str(a + 1), "label": "unknown"}) + "\n"
                            for a in range(40)))
    with pytest.raises(ValueError, match="has label 'unknown'"):
        run("vulpo", tiny, tmp_path, f"task={{name: jsonl, path: {path}}}", "roles.judge={backend: causal}",
            "rewards=[{name: correct}]", "advantage.format_reward=null", "advantage.criteria=[0, 0, 0]")


@pytest.mark.parametrize("override, error", [
    ("task.name=addition", "need a column 'label' of 'vul' or 'safe'.*task={name: labelled_addition}"),
    ("roles.judge={{backend: http, url: 'http://127.0.0.1:{port}/v1', model: m, wait_s: 0}}",
     "no answer from http://127.0.0.1:.*start an OpenAI-compatible server"),
])
def test_what_the_papers_setting_needs_is_refused_before_any_work(override, error, tiny, tmp_path, monkeypatch):
    """Data without labels, a judge server that does not answer: one line naming what is needed, before the warm
    start."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr("polo.train.trainer.ensure_warm_start", lambda *args: pytest.fail("warm start reached"))
    with pytest.raises(ConfigError, match=error):
        Trainer(load_recipe("vulpo", [*tiny, override.format(port=port)]), tmp_path, log=lambda *_: None)
