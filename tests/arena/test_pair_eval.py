"""The Personalized RewardBench harness (polo.arena.pair_eval): the worked example of the spec (strict and tie-half
accuracy, Pearson and Spearman across reward models), the seeded bootstrap interval, per-domain accuracy, the
no-rubric control and the rubric template."""
import math

import numpy as np
import pytest
import torch

from polo.arena.pair_eval import (NO_DOMAIN, RUBRIC_TEMPLATE, RewardModelScorer, condition, downstream_validity,
                                  evaluate_scorer, outcomes_report)
from polo.arena.stats import average_ranks, pearson, spearman
from polo.core.registry import ConfigError
from polo.policy.reward_model import RewardModel
from polo.policy.tiny import TinyModelConfig
from polo.tasks.base import Example

CHOSEN = [2.1, 0.3, 1.0, -0.5, 0.7]
REJECTED = [1.5, 0.9, 1.0, -1.2, 0.2]


def item(i, rubric=None, domain=None):
    columns = {"chosen": f"good {i}", "rejected": f"bad {i}"}
    columns |= {"user_rubric": rubric} if rubric else {}
    columns |= {"domain": domain} if domain else {}
    return Example(f"q{i}", "", columns)


class TableScorer:
    """Scores read from a table: ``good i`` → CHOSEN[i], ``bad i`` → REJECTED[i] (the spec's worked example)."""

    def score(self, rubric, prompt, response):
        kind, i = response.split()
        return (CHOSEN if kind == "good" else REJECTED)[int(i)]


def test_worked_example_strict_and_tie_half_accuracy():
    pairs = [item(i) for i in range(5)]
    strict = evaluate_scorer(TableScorer(), pairs)
    half = evaluate_scorer(TableScorer(), pairs, ties=0.5)
    assert strict["accuracy"] == pytest.approx(0.6, abs=1e-4)
    assert half["accuracy"] == pytest.approx(0.7, abs=1e-4)
    assert strict["no_rubric"] is None and strict["template"] is None  # no rubric anywhere: no control
    assert strict["per_domain"][NO_DOMAIN]["accuracy"] == pytest.approx(0.6, abs=1e-4)


def test_worked_example_correlations_across_reward_models():
    accuracies = [0.62, 0.70, 0.76]
    got = downstream_validity(accuracies, {"bon": [0.41, 0.47, 0.52], "ppo": [0.55, 0.53, 0.60]})
    assert got["bon"]["pearson"] == pytest.approx(0.9996, abs=1e-4)
    assert got["bon"]["spearman"] == pytest.approx(1.0, abs=1e-4)
    assert got["ppo"]["spearman"] == pytest.approx(0.5, abs=1e-4)
    with pytest.raises(ConfigError, match="one per reward model"):
        downstream_validity(accuracies, {"bon": [0.4, 0.5]})


def test_two_reward_models_give_an_order_not_a_correlation():
    """Two points always correlate ±1: over 2 reward models the report says whether the orders agree instead."""
    got = downstream_validity([0.62, 0.70], {"bon": [0.41, 0.47], "ppo": [0.60, 0.53], "flat": [0.5, 0.5]})
    assert got["bon"] == {"pearson": None, "spearman": None, "same_order": True}
    assert got["ppo"]["same_order"] is False and got["flat"]["same_order"] is None


def test_pearson_and_spearman_edge_cases():
    assert average_ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]  # ties share their mean rank
    assert spearman([1, 2, 3, 4], [10, 20, 20, 30]) == pytest.approx(pearson([1, 2, 3, 4], [1, 2.5, 2.5, 4]))
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))  # constant: undefined
    with pytest.raises(ValueError, match="equally long"):
        pearson([1, 2], [1, 2, 3])


def test_bootstrap_interval_contains_the_accuracy_and_is_seeded():
    rng = np.random.default_rng(0)
    chosen, rejected = torch.tensor(rng.normal(size=200)), torch.tensor(rng.normal(size=200))
    domains = [NO_DOMAIN] * 200
    a = outcomes_report(chosen, rejected, domains, seed=3)
    b = outcomes_report(chosen, rejected, domains, seed=3)
    assert a["ci"][0] < a["accuracy"] < a["ci"][1] and a["ci"][1] - a["ci"][0] < 0.2
    assert a["ci"] == b["ci"]  # the same seed: the same interval
    others = {tuple(outcomes_report(chosen, rejected, domains, seed=s)["ci"]) for s in range(4, 10)}
    assert len(others) > 1  # the seed is what draws the resamples
    assert a["n"] == 200 and a["nan_items"] == 0


def test_per_domain_accuracy_and_nan_scores():
    chosen = torch.tensor([1.0, 1.0, 0.0, float("nan")])
    rejected = torch.tensor([0.0, 2.0, -1.0, 0.0])
    report = outcomes_report(chosen, rejected, ["a", "a", "b", "b"])
    assert report["accuracy"] == 0.5 and report["nan_items"] == 1  # a NaN score counts as wrong
    assert {d: r["accuracy"] for d, r in report["per_domain"].items()} == {"a": 0.5, "b": 0.5}
    assert report["per_domain"]["a"]["n"] == 2


class RubricReader:
    """Prefers the response that names the rubric's word, and sees the rubric only through the template."""

    template = "[{rubric}] {prompt}"

    def score(self, rubric, prompt, response):
        text = condition(self.template, rubric, prompt)
        return float(text.startswith("[") and text[1:text.index("]")] in response)


def test_no_rubric_control_shows_a_model_that_reads_the_rubric():
    pairs = [Example(f"q{i}", "", {"chosen": f"brief {i}", "rejected": f"long {i}", "user_rubric": "brief",
                                   "domain": "style"}) for i in range(4)]
    report = evaluate_scorer(RubricReader(), pairs)
    assert report["accuracy"] == 1.0 and report["template"] == "[{rubric}] {prompt}"
    assert report["no_rubric"]["accuracy"] == 0.0 and report["no_rubric"]["drop"] == 1.0  # all ties: strict 0
    assert evaluate_scorer(RubricReader(), pairs, ties=0.5)["no_rubric"]["accuracy"] == 0.5


def test_the_rubric_template_conditions_the_prompt_and_is_checked():
    assert condition(RUBRIC_TEMPLATE, "be brief", "Hi {x}") == "User preferences:\nbe brief\n\nHi {x}"
    assert condition(RUBRIC_TEMPLATE, None, "Hi") == condition(RUBRIC_TEMPLATE, "", "Hi") == "Hi"
    torch.manual_seed(0)
    rm = RewardModel.builtin(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=128))
    with torch.no_grad():
        rm.model.score.weight.normal_()
    scorer = RewardModelScorer(rm, "<{rubric}> {prompt}", batch_size=2)
    got = scorer.scores(["r1", None, "r3"], ["a", "b", "c"], ["x", "y", "z"])
    expected = rm.score(["<r1> a", "b", "<r3> c"], ["x", "y", "z"]).tolist()
    assert got == pytest.approx(expected, abs=1e-5) and scorer.score("r1", "a", "x") == pytest.approx(got[0], abs=1e-5)
    for bad in ("{prompt}", "{rubric} {prompt} {other}", "{rubric} {prompt} }"):
        with pytest.raises(ConfigError, match="template"):
            RewardModelScorer(rm, bad)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="no pairs"):
        evaluate_scorer(TableScorer(), [])
    with pytest.raises(ConfigError, match="ties"):
        evaluate_scorer(TableScorer(), [item(0)], ties=2.0)
    with pytest.raises(ConfigError, match="resamples"):
        evaluate_scorer(TableScorer(), [item(0)], resamples=0)
