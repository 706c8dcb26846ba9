"""The outer-loop population math (polo.core.population): INSPO's worked example ``inspo_ema`` and edge cases."""
import pytest
import torch

from polo.core.population import (admitted, ema_scores, hard_tasks, prune_indices, sampling_probs,
                                  strictly_better)


def test_inspo_ema_worked_example():
    scores, counts = ema_scores(torch.tensor([0.5, 0.3, 0.1]), torch.tensor([40, 40, 40]), torch.tensor([0, 1, 2]),
                                torch.tensor([0.8, 0.2, 0.0]), alpha=0.1)
    assert torch.allclose(scores, torch.tensor([0.53, 0.29, 0.09], dtype=torch.float64), atol=1e-4)
    assert counts.tolist() == [41, 41, 41]
    probs = sampling_probs(scores, tau=0.1)
    assert torch.allclose(probs, torch.tensor([0.9066, 0.0822, 0.0111], dtype=torch.float64), atol=1e-4)


def test_ema_means_per_candidate_and_leaves_unused_alone():
    # candidate 0: rollouts 1.0 and 0.0 (mean 0.5); candidate 2 unused
    scores, counts = ema_scores(torch.tensor([0.2, 0.4, 0.9]), torch.tensor([3, 0, 5]), torch.tensor([0, 0, 1]),
                                torch.tensor([1.0, 0.0, 1.0]), alpha=0.5)
    assert torch.allclose(scores, torch.tensor([0.35, 0.7, 0.9], dtype=torch.float64))
    assert counts.tolist() == [5, 1, 5]


def test_first_attribution_sets_the_score():
    scores, _ = ema_scores(torch.tensor([0.0, 0.3]), torch.tensor([0, 8]), torch.tensor([0, 1]), torch.tensor([0.6, 1.0]),
                           alpha=0.1, first_sets=True)
    assert torch.allclose(scores, torch.tensor([0.6, 0.37], dtype=torch.float64))


def test_single_rollout_and_empty_step():
    scores, counts = ema_scores(torch.tensor([0.5]), torch.tensor([1]), torch.tensor([0]), torch.tensor([1.0]), 1.0)
    assert scores.tolist() == [1.0] and counts.tolist() == [2]
    scores, counts = ema_scores(torch.tensor([0.5]), torch.tensor([1]), torch.tensor([], dtype=torch.long),
                                torch.tensor([]), 0.1)
    assert scores.tolist() == [0.5] and counts.tolist() == [1]


def test_all_equal_scores_sample_uniformly():
    assert torch.allclose(sampling_probs(torch.full((4,), 0.7), 0.1), torch.full((4,), 0.25, dtype=torch.float64))


def test_untried_candidates_count_as_the_best():
    probs = sampling_probs(torch.tensor([0.2, 0.0, 0.6]), 0.1, counts=torch.tensor([5, 0, 3]))
    assert probs[1] == probs[2] and probs[1] > probs[0]
    uniform = sampling_probs(torch.tensor([0.3, 0.0]), 0.1, counts=torch.tensor([0, 0]))
    assert torch.allclose(uniform, torch.tensor([0.5, 0.5], dtype=torch.float64))


@pytest.mark.parametrize("call, message", [
    (lambda: ema_scores(torch.zeros(2), torch.zeros(2), torch.tensor([0]), torch.tensor([float("nan")]), 0.1),
     "rewards must be finite"),
    (lambda: ema_scores(torch.zeros(2), torch.zeros(2), torch.tensor([2]), torch.tensor([1.0]), 0.1), "outside 0..1"),
    (lambda: ema_scores(torch.zeros(2), torch.zeros(2), torch.tensor([0]), torch.tensor([1.0]), 0.0), "alpha"),
    (lambda: sampling_probs(torch.zeros(2), 0.0), "tau must be > 0"),
    (lambda: sampling_probs(torch.tensor([float("nan"), 0.0]), 0.1), "scores must be finite"),
])
def test_bad_inputs_raise_clear_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_prune_lowest_eligible_and_keeps_the_minimum():
    scores, counts = torch.tensor([0.5, 0.1, 0.05, 0.1, 0.9]), torch.tensor([40, 40, 10, 40, 40])
    # index 2 is lowest but has too few attributions; ties at 0.1: the earlier index first
    assert prune_indices(scores, counts, k=2, n_min=32, keep_min=2).tolist() == [1, 3]
    assert prune_indices(scores, counts, k=2, n_min=32, keep_min=4).tolist() == [1]
    assert prune_indices(scores, counts, k=2, n_min=100, keep_min=1).tolist() == []
    assert prune_indices(scores, counts, k=0, n_min=0, keep_min=1).tolist() == []


def test_admission_against_the_median():
    scores = torch.tensor([0.25, 0.5, 0.75, 1.0])  # median 0.625 (the mean of the two middle values)
    assert admitted(torch.tensor([0.625, 0.5, 0.9]), scores).tolist() == [True, False, True]
    assert admitted(torch.tensor([0.1]), torch.tensor([])).tolist() == [True]


def test_hard_tasks_and_strict_improvement():
    success = torch.tensor([0.5, 0.0, 0.25, 0.125, 1.0])
    assert hard_tasks(success, 0.25, cap=64).tolist() == [1, 3, 2]
    assert hard_tasks(success, 0.25, cap=2).tolist() == [1, 3]
    assert hard_tasks(success, -0.1, cap=2).tolist() == []
    assert strictly_better(0.5, torch.tensor([0.5, 0.4])) == -1
    assert strictly_better(0.5, torch.tensor([0.5, 0.75, 0.6])) == 1
    assert strictly_better(0.5, torch.tensor([])) == -1
