"""``polo eval RUN --grue``: the three GRUE groups (task, naturalness, diversity) of a tiny 2-step run, printed and
written to RUN/grue.json; mid-run checkpoints, the starting model (step 0), a reference override and the
refusals."""
import json
import math

import pytest
import yaml

from polo.cli import main

GROUPS = ("task", "naturalness", "diversity")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import TINY  # the tiny fixture is function-scoped; this run is shared by the module

    run = tmp_path_factory.mktemp("grue") / "run"
    assert main(["train", "grpo", *TINY, "train.steps=2", "train.save_every=1", "--run-dir", str(run)]) == 0
    return run


def grue(run, capsys, *extra):
    assert main(["eval", str(run), "--grue", "--size", "6", "--samples", "3", *extra]) == 0
    return capsys.readouterr().out


def test_grue_table_and_file(run, capsys):
    out = grue(run, capsys)
    for group in GROUPS:
        assert group in out
    for metric in ("greedy/accuracy", "sampled/correct", "sampled/digit_match", "perplexity", "distinct-1",
                   "msttr-100"):
        assert metric in out
    result = json.loads((run / "grue.json").read_text())
    assert set(GROUPS) <= set(result) and "step_000002" in result["policy"]
    assert result["examples"] == 6 and result["samples_per_prompt"] == 3
    for mode in ("greedy", "sampled"):
        ppl = result["naturalness"][f"{mode}/perplexity"]
        assert math.isfinite(ppl) and ppl >= 1
        assert 0 <= result["task"][f"{mode}/accuracy"] <= 1
    assert 0 < result["diversity"]["distinct-1"] <= 1 and result["diversity"]["mean_length"] > 0
    assert result["diversity"]["msttr-100"] is None  # 18 short answers: fewer than 100 tokens
    assert result["higher_is_better"]["greedy/perplexity"] is False
    assert result["higher_is_better"]["distinct-2"] is True and result["higher_is_better"]["mean_length"] is None


def test_same_seed_same_result_other_seed_other_samples(run, capsys):
    grue(run, capsys, "--seed", "5")
    first = json.loads((run / "grue.json").read_text())
    grue(run, capsys, "--seed", "5")
    assert json.loads((run / "grue.json").read_text()) == first
    grue(run, capsys, "--seed", "6")
    other = json.loads((run / "grue.json").read_text())
    assert other["task"]["greedy/accuracy"] == first["task"]["greedy/accuracy"]  # greedy: no seed


def test_mid_run_checkpoint_and_starting_model(run, capsys):
    grue(run, capsys, "--step", "1")
    mid = json.loads((run / "grue_step_1.json").read_text())
    assert "step_000001" in mid["policy"]
    grue(run, capsys, "--step", "0")
    start = json.loads((run / "grue_step_0.json").read_text())
    assert start["policy"].startswith("starting model") and start["reference_lm"] in start["policy"]


def test_character_unit(run, capsys):
    """Addition answers are one word each; counted in characters the same samples give longer, finer n-grams."""
    grue(run, capsys, "--seed", "3")
    words = json.loads((run / "grue.json").read_text())
    out = grue(run, capsys, "--seed", "3", "--unit", "chars")
    chars = json.loads((run / "grue.json").read_text())
    assert "diversity in chars" in out and words["diversity_unit"] == "words" and chars["diversity_unit"] == "chars"
    assert chars["task"] == words["task"] and chars["naturalness"] == words["naturalness"]  # the same samples
    assert chars["diversity"]["mean_length"] > words["diversity"]["mean_length"]
    assert chars["diversity"]["vocab_size-2"] > words["diversity"]["vocab_size-2"]


def test_reference_override(run, capsys, chat_checkpoint):
    """Any local causal LM scores naturalness, with its own tokenizer (here a BPE Qwen2, untrained)."""
    grue(run, capsys)
    default = json.loads((run / "grue.json").read_text())
    reference = chat_checkpoint(256)
    grue(run, capsys, "--reference", str(reference))
    result = json.loads((run / "grue.json").read_text())
    assert result["reference_lm"] == str(reference) and default["reference_lm"] != str(reference)
    assert result["task"] == default["task"] and result["diversity"] == default["diversity"]  # the same samples
    for mode in ("greedy", "sampled"):
        ppl = result["naturalness"][f"{mode}/perplexity"]
        assert math.isfinite(ppl) and ppl >= 1 and ppl != pytest.approx(default["naturalness"][f"{mode}/perplexity"])


def test_refusals(run, tmp_path, capsys):
    assert main(["eval", str(run), "--samples", "2"]) != 0
    assert "belong to polo eval --grue" in capsys.readouterr().err
    assert main(["eval", str(run), "--unit", "chars"]) != 0
    assert "--unit belong to polo eval --grue" in capsys.readouterr().err
    assert main(["eval", str(run), "--grue", "--samples", "0"]) != 0
    assert "samples must be at least 1" in capsys.readouterr().err
    assert main(["eval", str(run), "--grue", "--step", "7"]) != 0
    assert "no checkpoint of step 7" in capsys.readouterr().err
    agent = tmp_path / "agent"
    agent.mkdir()
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["task"] = {"name": "environment", "env": {"name": "TextGrid-v0"}}
    (agent / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["eval", str(agent), "--grue"]) != 0
    assert "has none" in capsys.readouterr().err
