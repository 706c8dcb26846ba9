import math

import pytest
import torch

from polo.core.advantages.group import DrGRPO
from polo.core.advantages.verpo_tests import VeRPOTests, pass_rates, rate_density, verpo_rewards

from .helpers import build_batch, close

nan = math.nan
P = [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]


def results_batch(results, group=None, mask=None):
    batch = build_batch([0.0] * len(results), group, mask=mask)
    batch.extras["test_results"] = torch.tensor(results, dtype=torch.float64)
    return batch


def test_worked_example():
    results = torch.tensor(P, dtype=torch.float64)
    inv = torch.zeros(3, dtype=torch.long)
    rate, seen = pass_rates(results, inv, 1)
    close(rate[0], [1.0, 0.6667, 0.3333, 0.3333])
    close(rate_density(rate, seen, 0.1)[0], [1.0039, 1.0116, 2.0039, 2.0039])
    close(torch.exp(-rate[0]), [0.3679, 0.5134, 0.7165, 0.7165])  # w before the density
    dense, outcome, weight = verpo_rewards(results, inv, alpha=1.0, sigma=0.1, delta=1e-6, gamma=1.0)
    close(weight[0], [0.3665, 0.5075, 0.3576, 0.3576])
    close(dense, [0.8740, 1.5891, 0.3665])
    close(outcome, [0.0, 1.0, 0.0])
    est = VeRPOTests()
    close(VeRPOTests(beta=0.0)(results_batch(P)).advantages[:, 0], [-0.3333, 0.6667, -0.3333])  # A_traj
    turn = est(results_batch(P)).advantages[:, 0] - VeRPOTests(beta=0.0)(results_batch(P)).advantages[:, 0]
    close(turn, [-0.0692, 0.6459, -0.5767])  # beta · A_turn
    close(est(results_batch(P)).advantages[:, 0], [-0.4025, 1.3126, -0.9101])
    # the contrast: a plain pass-rate reward, mean-centred
    close(DrGRPO()(build_batch(results.mean(-1))).advantages[:, 0], [-0.0833, 0.4167, -0.3333])


def test_missing_tests_are_left_out():
    padded = [row + [nan, nan] for row in P]
    close(VeRPOTests()(results_batch(padded)).advantages, VeRPOTests()(results_batch(P)).advantages)
    dense, outcome, _ = verpo_rewards(torch.tensor([[nan, nan], [1.0, 1.0]]), torch.tensor([0, 0]), 1.0, 0.1, 1e-6, 1.0)
    assert dense[0] == 0 and outcome.tolist() == [0.0, 1.0]  # no result at all: both rewards 0


def test_degenerate_groups_and_gamma():
    out = VeRPOTests()(results_batch([[1, 0], [1, 0], [0, 1]], group=[0, 0, 1]))
    assert out.advantages[:, 0].tolist() == [0.0, 0.0, 0.0]  # an all-equal group and a single rollout
    _, outcome, _ = verpo_rewards(torch.tensor(P, dtype=torch.float64), torch.zeros(3, dtype=torch.long),
                                  1.0, 0.1, 1e-6, gamma=0.9)
    close(outcome, [0.0, 0.9, 0.0])


def test_groups_are_independent_and_interleaved_ids_work():
    other = [[0, 0, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]]
    rows = [P[0], other[0], P[1], other[1], P[2], other[2]]
    out = VeRPOTests()(results_batch(rows, group=[5, 2, 5, 2, 5, 2])).advantages[:, 0]
    close(out[[0, 2, 4]], [-0.4025, 1.3126, -0.9101])
    close(out[[1, 3, 5]], VeRPOTests()(results_batch(other)).advantages[:, 0])


def test_masked_tokens_and_bad_inputs():
    out = VeRPOTests()(results_batch(P, mask=[[1, 1], [1, 0], [0, 0]]))
    assert out.advantages[1, 1] == 0 and out.advantages[2].eq(0).all() and out.advantages[0, 0] == out.advantages[0, 1]
    assert out.diagnostics["verpo/pass_all"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="needs test_results"):
        VeRPOTests()(build_batch([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"1 \(pass\), 0 \(fail\) or NaN"):
        VeRPOTests()(results_batch([[0.5, 1.0], [1.0, 1.0]]))
    assert VeRPOTests().needs() == {"test_results"}


# ---- mutation-testing kills


def test_pass_rates_skip_missing_results_and_count_a_test_run_once():
    # test 0 ran on all three rollouts (2 passes), test 1 only on the third (1 pass), test 2 on none
    results = torch.tensor([[1.0, nan, nan], [0.0, nan, nan], [1.0, 1.0, nan]], dtype=torch.float64)
    rate, seen = pass_rates(results, torch.zeros(3, dtype=torch.long), 2)  # group 1 has no rollout
    close(rate, [[2 / 3, 1.0, 0.0], [0.0, 0.0, 0.0]])  # 2/3, 1/1, nothing ran: 0
    assert seen.tolist() == [[True, True, False], [False, False, False]]


def test_delta_is_added_to_the_density():
    # worked example with δ = 0.5: w' = exp(−ρ)/(N̂ + 0.5) = [0.3679/1.5039, 0.5134/1.5116, 0.7165/2.5039, same]
    dense, _, weight = verpo_rewards(torch.tensor(P, dtype=torch.float64), torch.zeros(3, dtype=torch.long),
                                     alpha=1.0, sigma=0.1, delta=0.5, gamma=1.0)
    close(weight, [[0.2446, 0.3397, 0.2862, 0.2862]])
    close(dense, [0.5843, 1.1566, 0.2446])  # w0 + w1, the sum of all four, w0


def test_outcome_keeps_the_results_float64_and_an_empty_batch_has_no_group():
    _, outcome, weight = verpo_rewards(torch.tensor(P, dtype=torch.float64), torch.tensor([4, 4, 9]),
                                       1.0, 0.1, 1e-6, gamma=0.9)
    assert outcome.dtype == torch.float64 and outcome.tolist() == [0.0, 0.9, 0.0]
    assert weight.shape == (2, 4)  # one row per group present
    dense, outcome, weight = verpo_rewards(torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.long),
                                           1.0, 0.1, 1e-6, 1.0)
    assert dense.shape == outcome.shape == (0,) and weight.shape == (0, 3)


def test_integer_results_are_read_in_the_masks_float64():
    ints = build_batch([0.0] * 3)
    ints.extras["test_results"] = torch.tensor(P)  # int64
    expected = VeRPOTests()(results_batch(P)).advantages
    torch.testing.assert_close(VeRPOTests()(ints).advantages, expected, atol=1e-12, rtol=0)


def test_a_single_rollout_that_passes_gets_zero():
    # a group of one: both terms are centred on the rollout itself (R_traj = 1 would otherwise leak through)
    assert VeRPOTests()(results_batch([[1.0, 1.0]])).advantages.tolist() == [[0.0]]


def test_metrics_of_the_worked_example_and_of_an_empty_batch():
    d = VeRPOTests()(results_batch(P)).diagnostics
    assert set(d) == {"verpo/turn_reward", "verpo/pass_all"}
    assert d["verpo/turn_reward"] == pytest.approx((0.8740 + 1.5891 + 0.3665) / 3, abs=1e-4)
    assert d["verpo/pass_all"] == pytest.approx(1 / 3)
    empty = build_batch(torch.zeros(0, 1), mask=torch.zeros(0, 1))
    empty.extras["test_results"] = torch.zeros(0, 2, dtype=torch.float64)
    out = VeRPOTests()(empty)
    assert out.advantages.shape == (0, 1)
    assert out.diagnostics == {"verpo/turn_reward": 0.0, "verpo/pass_all": 0.0}


def test_error_messages_show_the_shape_and_the_first_five_bad_values():
    batch = build_batch([0.0] * 3)
    batch.extras["test_results"] = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"needs test_results \[B=3, U\], got \(3,\)$"):
        VeRPOTests()(batch)
    with pytest.raises(ValueError, match=r"got \[2\.0, 3\.0, 4\.0, 5\.0, 6\.0\]$"):
        VeRPOTests()(results_batch([[2, 3, 4, 1], [5, 6, 7, 0]]))
