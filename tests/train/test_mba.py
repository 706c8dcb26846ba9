"""MBA's shipped judge gives a signal: its rule judge (the task's verifier and per-digit credit, named as such in
the recipe) scores the completions as the task's rewards do, so the judged reward varies within groups and GRPO
has advantages to train on. (The previous default, a frozen copy of the built-in model asked "Creative?",
gave p(Yes) ~ 1e-6 to every response: a judged reward of noise.)"""
from polo.train.config import load_recipe
from polo.train.trainer import Trainer


def test_mba_trains_on_its_rule_judges_two_criteria(tiny, tmp_path):
    recipe = load_recipe("mba", [*tiny, "seed=0", "train.steps=2"])
    rows = [r for r in Trainer(recipe, tmp_path / "run", log=lambda *_: None).run() if r["step"] > 0]
    assert len(rows) == 2
    for row in rows:
        assert row["judge/failures"] == 0.0
        assert row["judge_multi/correct"] == row["train/accuracy"]  # criterion 1 is the verifier itself
        assert row["judge_multi/digit_match"] >= row["judge_multi/correct"]  # a correct answer matches every digit
        # seed 0: std 0.19 / 0.069, zero-advantage fraction 0 / 0.24; the old causal default's std: ~1e-6
        assert row["rewards/judge_multi/std"] > 0.02, row
        assert row["advantage/zero_frac"] < 0.5, row
