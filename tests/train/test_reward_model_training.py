"""``polo rm`` (polo.train.reward_model): the Bradley–Terry loss by hand, the pair split, the settings, and a
reward model that learns to prefer the verified answer of the addition task on held-out prompts."""
import json
import math
import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from polo.cli import main
from polo.core.registry import ConfigError
from polo.policy.reward_model import RM_INFO, RewardModel
from polo.tasks.addition import Addition
from polo.tasks.base import Example
from polo.train.metrics import read_metrics
from polo.tasks.preferences import read_pairs, rubric_conditioned
from polo.train.reward_model import (bradley_terry_loss, evaluate_pairs, load_settings, score_margins,
                                     split_pairs, train_reward_model)

SMALL = ["tiny.hidden_size=32", "tiny.num_layers=1", "tiny.num_heads=2", "tiny.intermediate_size=64"]


def nll(x: float) -> float:
    """−log σ(x)."""
    return math.log1p(math.exp(-x))


def test_bradley_terry_loss_by_hand():
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.5])
    # −log σ(1) = 0.313262, −log σ(−0.5) = 0.974077
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx((0.313262 + 0.974077) / 2, abs=1e-5)
    margin = torch.tensor([0.5, 0.0])  # the first pair must now be separated by 0.5: −log σ(0.5) = 0.474077
    assert bradley_terry_loss(chosen, rejected, margin).item() == pytest.approx((0.474077 + 0.974077) / 2, abs=1e-5)
    # centring: η · (r_w + r_l)² = 0.1 · (1², 0.5²) → + 0.1 · (1 + 0.25) / 2
    centred = bradley_terry_loss(chosen, rejected, center=0.1).item()
    assert centred == pytest.approx((nll(1.0) + nll(-0.5)) / 2 + 0.0625, abs=1e-5)
    equal = torch.zeros(3)
    assert bradley_terry_loss(equal, equal).item() == pytest.approx(math.log(2), abs=1e-6)  # all pairs tied
    assert bradley_terry_loss(torch.tensor([float("nan")]), torch.tensor([0.0])).isnan()  # NaN propagates


def test_score_margins_use_both_scores_or_none():
    pairs = [Example("p", "", {"chosen": "a", "rejected": "b", "chosen_score": 5, "rejected_score": 2}),
             Example("q", "", {"chosen": "a", "rejected": "b", "chosen_score": 5})]
    assert score_margins(pairs, 0.5).tolist() == [1.5, 0.0]
    assert score_margins(pairs, 0.0).tolist() == [0.0, 0.0]
    nan = [Example("p", "", {"chosen": "a", "rejected": "b", "chosen_score": float("nan"), "rejected_score": 2})]
    assert score_margins(nan, 0.0).tolist() == [0.0]  # scores unused
    with pytest.raises(ConfigError, match="must be finite"):
        score_margins(nan, 1.0)


def test_settings_from_overrides_name_a_bad_key():
    settings = load_settings(["lr=1e-4", "tiny.hidden_size=64"], epochs=3)
    assert (settings.lr, settings.tiny.hidden_size, settings.epochs) == (1e-4, 64, 3)
    with pytest.raises(ConfigError, match="lrr"):
        load_settings(["lrr=1e-4"])
    with pytest.raises(ConfigError, match="epochs"):
        load_settings(["epochs=0"])


def test_the_held_out_split_is_by_prompt_and_must_not_be_empty():
    pairs = [Example(f"{i}+{i}=", "", {"chosen": str(2 * i), "rejected": "0"}) for i in range(1, 60)] * 2
    train, held = split_pairs(pairs, None, 0.3, "pairs.jsonl")
    assert train and held and len(train) + len(held) == len(pairs)
    assert not {e.prompt for e in train} & {e.prompt for e in held}
    assert split_pairs(pairs, None, 0.0, "pairs.jsonl") == (pairs, [])
    assert split_pairs(pairs, pairs[:3], 0.3, "pairs.jsonl") == (pairs, pairs[:3])
    with pytest.raises(ConfigError, match="both must be non-empty"):
        split_pairs(pairs[:1], None, 0.1, "pairs.jsonl")


def write_addition_pairs(path, examples, seed):
    """The verified answer chosen, a wrong sum (any other value a one-digit sum can take) rejected."""
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for e in examples:
            wrong = rng.choice([v for v in range(19) if v != int(e.answer)])
            fh.write(json.dumps({"prompt": e.prompt, "chosen": e.answer, "rejected": str(wrong)}) + "\n")
    return path


def test_rm_learns_to_prefer_verified_addition_answers_on_held_out_prompts(tmp_path):
    """Seed 0: training pairs from the task's train split, held-out pairs from its test split (prompts never seen
    in training). Measured: 0.83 (1 and 2 threads) after 12 epochs, from 0.46 after the first; chance is 0.5."""
    task = Addition(digits=1, test_fraction=0.3)
    train = write_addition_pairs(tmp_path / "train.jsonl", task.examples("train", 1000, seed=0), seed=0)
    held = write_addition_pairs(tmp_path / "held.jsonl", task.examples("test", 200, seed=0), seed=1)
    settings = load_settings([*SMALL, "lr=3e-3", "batch_size=64", "epochs=12", "seed=0"])
    result = train_reward_model(train, tmp_path / "rm", settings, held, log=lambda line: None)
    assert result["steps"] == 12 * 16
    assert result["eval/accuracy"] > 0.75
    rows = read_metrics(tmp_path / "rm")
    evals = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    assert len(evals) == 12 and evals[-1] == pytest.approx(result["eval/accuracy"])
    assert evals[0] < 0.6  # it learnt, it did not start there
    rm = RewardModel.load(tmp_path / "rm")  # the saved model gives the reported accuracy
    again = evaluate_pairs(rm, read_pairs(held), 64)
    assert again["accuracy"] == pytest.approx(result["eval/accuracy"], abs=1e-6)
    info = json.loads((tmp_path / "rm" / RM_INFO).read_text())
    assert info["metrics"]["eval/accuracy"] == result["eval/accuracy"] and info["settings"]["epochs"] == 12


def tiny_pairs(path, n=24, rubric=False):
    """``n`` addition pairs (with a rubric and two domains when ``rubric``)."""
    rows = []
    for i in range(n):
        row = {"prompt": f"{i}+{i % 7}=", "chosen": str(i + i % 7), "rejected": str(i + i % 7 + 1), "id": str(i)}
        if rubric:
            row |= {"user_rubric": "exact", "domain": "even" if i % 2 == 0 else "odd"}
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_polo_rm_and_rm_eval_run_end_to_end(tmp_path, capsys):
    pairs = tiny_pairs(tmp_path / "pairs.jsonl")
    out = tmp_path / "rm"
    assert main(["rm", str(pairs), "--out", str(out), "--epochs", "2", *SMALL, "batch_size=8", "eval_fraction=0.3",
                 "log_every=1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["steps"] == len(read_metrics(out)) - 2  # a row per step, an eval row per epoch
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        hf = model(**tokenizer(["3+3=6"], return_tensors="pt")).logits[0, 0]
    assert hf.item() == pytest.approx(RewardModel.load(out).score(["3+3="], ["6"]).item(), abs=1e-5)
    # a second run may replace a reward model folder; a folder of other files is refused
    assert main(["rm", str(pairs), "--out", str(out), *SMALL, "eval_fraction=0.3"]) == 0
    assert main(["rm", str(pairs), "--out", str(tmp_path / "rm2"), *SMALL, "eval_fraction=0.3", "seed=1"]) == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    assert main(["rm", str(pairs), "--out", str(tmp_path / "other"), *SMALL]) == 2
    assert main(["rm", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "x")]) == 2
    assert main(["rm", str(pairs), "--out", str(tmp_path / "x"), *SMALL, "lr=1e30", "warmup_steps=0",
                 "batch_size=4", "eval_fraction=0"]) == 1  # diverged: a non-finite loss stops it
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".tmp_*"))  # nothing half-written
    capsys.readouterr()

    rubric_pairs = tiny_pairs(tmp_path / "rubric.jsonl", rubric=True)
    assert main(["rm-eval", str(rubric_pairs), "--rm", str(out), "--rm", str(tmp_path / "rm2"), "--ties", "half",
                 "--downstream", "bon=0.1,0.2"]) == 0
    report = json.loads(capsys.readouterr().out)
    one = report["reward_models"][str(out)]
    assert report["ties"] == 0.5 and one["template"] == report["template"] and "{rubric}" in one["template"]
    assert one["n"] == 24 and one["ci"][0] <= one["accuracy"] <= one["ci"][1]
    assert set(one["per_domain"]) == {"even", "odd"} and one["no_rubric"]["n"] == 24
    assert report["downstream"]["bon"]["pearson"] is None  # 2 reward models: an order, not a correlation
    assert report["downstream"]["bon"]["same_order"] in (True, False, None)
    assert main(["rm-eval", str(rubric_pairs), "--rm", str(out), "--downstream", "bon=0.1,0.2"]) == 2
    assert main(["rm-eval", str(rubric_pairs), "--rm", str(out), "--rm", str(out)]) == 2
    assert main(["rm-eval", str(rubric_pairs), "--rm", str(out), "--template", "{prompt}"]) == 2


def test_polo_rm_reads_the_user_rubric(tmp_path):
    """Each prompt twice, with opposite preferences that only its ``user_rubric`` decides ("short" prefers "x",
    "long" prefers "xxxxxxxx"). ``polo rm`` puts the rubric ahead of the prompt (``rubric_template``), so the
    held-out pairs are learnt (seed 0: 1.0); read without their rubrics, the two pairs of a prompt are the same
    texts with opposite labels, so the same model is right on exactly one of them: 0.5."""
    rows = [{"prompt": f"{i}+{i % 5}=", "user_rubric": rubric, "chosen": chosen, "rejected": rejected}
            for i in range(40) for rubric, chosen, rejected in (("short", "x", "xxxxxxxx"), ("long", "xxxxxxxx", "x"))]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    settings = load_settings([*SMALL, "lr=3e-3", "batch_size=16", "epochs=12", "seed=0", "eval_fraction=0.25"])
    result = train_reward_model(path, tmp_path / "rm", settings, log=lambda line: None)
    assert result["eval/accuracy"] >= 0.9
    train, held = split_pairs(read_pairs(path), None, 0.25, str(path))
    assert evaluate_pairs(RewardModel.load(tmp_path / "rm"), held, 64)["accuracy"] == pytest.approx(0.5)
    assert rubric_conditioned(held[:1])[0].prompt == f"User preferences:\nshort\n\n{held[0].prompt}"
    with pytest.raises(ConfigError, match="must contain both"):
        load_settings(rubric_template="{prompt} alone")
