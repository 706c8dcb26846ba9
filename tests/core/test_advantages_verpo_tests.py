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
