"""The continuous-control PPO base (CleanRL's ppo_continuous_action) against its worked example: GAE over episode
boundaries, advantage standardisation, the clipped surrogate through the registered ``ppo_clip`` and
``token_mean``, the clipped value loss, the diagonal Gaussian, and the KL-adaptive learning rate."""
import math

import pytest
import torch

from polo.core.advantages.gae import gae
from polo.core.aggregation import StepCounts
from polo.core.batch import RolloutBatch
from polo.control.math.distributions import (bernoulli_entropy, bernoulli_logp, categorical_entropy,
                                             categorical_logp, diag_gaussian_entropy, diag_gaussian_logp)
from polo.core.losses.value import clipped_value_loss
from polo.core.registry import ADVANTAGES, AGGREGATIONS, POLICY_LOSSES
from polo.control.engines.gym import action_rows
from polo.control.methods.ppo import adapt_kl_lr, standardize_advantages

R = torch.tensor([[1.0, 0.0, 2.0, -1.0]])
V = torch.tensor([[0.5, 0.4, 0.3, 0.6]])


def test_gae_stops_at_an_episode_end_and_bootstraps_the_row_end():
    adv = gae(R, V, torch.ones(1, 4), 0.99, 0.95, dones=torch.tensor([[0.0, 1, 0, 0]]), bootstrap=torch.tensor([0.2]))
    assert torch.allclose(adv, torch.tensor([[0.5198, -0.4000, 0.9754, -1.4020]]), atol=1e-4)
    assert torch.allclose(adv + V, torch.tensor([[1.0198, 0.0000, 1.2754, -0.8020]]), atol=1e-4)
    no_end = gae(R, V, torch.ones(1, 4), 0.99, 0.95, dones=torch.zeros(1, 4), bootstrap=torch.tensor([0.2]))
    assert torch.allclose(no_end, torch.tensor([[1.6619, 0.8144, 0.9754, -1.4020]]), atol=1e-4)


def test_gae_without_dones_or_bootstrap_is_the_language_model_form():
    assert torch.equal(gae(R, V, torch.ones(1, 4), 0.99, 0.95),
                       gae(R, V, torch.ones(1, 4), 0.99, 0.95, dones=torch.zeros(1, 4), bootstrap=torch.zeros(1)))


def _env_rows(dones):
    n, t = R.shape
    return RolloutBatch(prompt_ids=torch.zeros(n, 0, dtype=torch.long), prompt_mask=torch.zeros(n, 0, dtype=torch.long),
                        response_ids=torch.zeros(n, t, dtype=torch.long), response_mask=torch.ones(n, t, dtype=torch.long),
                        group=torch.arange(n), rewards=R.sum(1, keepdim=True), values=V,
                        extras={"step_rewards": R, "dones": dones, "bootstrap_value": torch.tensor([0.2])})


def test_registered_gae_reads_environment_rows():
    estimator = ADVANTAGES.build({"name": "gae", "gamma": 0.99, "lam": 0.95, "whiten": False})
    result = estimator(_env_rows(torch.tensor([[0.0, 1, 0, 0]])))
    assert torch.allclose(result.advantages, torch.tensor([[0.5198, -0.4000, 0.9754, -1.4020]]), atol=1e-4)
    assert torch.allclose(result.returns, torch.tensor([[1.0198, 0.0000, 1.2754, -0.8020]]), atol=1e-4)


def test_advantage_standardisation_uses_the_unbiased_std():
    x = torch.tensor([1.0, -1.0, 2.0, 0.5])
    assert torch.allclose(standardize_advantages(x), torch.tensor([0.3, -1.3, 1.1, -0.1]), atol=1e-4)


def test_advantage_standardisation_adds_eps_to_the_std_as_cleanrl_does():
    # std = 1e-6 (unbiased) in float64: CleanRL's (x − μ)/(std + 1e-8) = ±0.866/1.01 ≈ ±0.8575; dividing by
    # sqrt(var + 1e-8) instead would give ±0.866e-6/1.00005e-4 ≈ ±0.0087, ~100× smaller.
    x = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64) * (math.sqrt(3) / 2 * 1e-6)
    assert torch.allclose(standardize_advantages(x), torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
                          * (math.sqrt(3) / 2 / 1.01), rtol=1e-6)


def test_clipped_surrogate_through_the_language_model_loss_and_aggregation():
    rho, adv = torch.tensor([0.7, 1.0, 1.3, 1.1]), torch.tensor([1.0, -1.0, 2.0, -0.5])
    rows = action_rows(torch.zeros(4), adv)
    out = POLICY_LOSSES.build({"name": "ppo_clip"})(rho.log()[:, None], rows)
    assert torch.allclose(out.token_loss[:, 0], torch.tensor([-0.7, 1.0, -2.4, 0.55]), atol=1e-4)
    mean = AGGREGATIONS.build("token_mean")(out.token_loss, rows.mask, StepCounts.from_mask(rows.response_mask, 1))
    assert float(mean) == pytest.approx(-0.3875, abs=1e-4)
    log_ratio = rho.log()
    assert float(((rho - 1) - log_ratio).mean()) == pytest.approx(0.0248, abs=1e-4)
    assert float(((rho - 1).abs() > 0.2).float().mean()) == 0.5


def test_factored_rows_clip_each_factor_with_the_sample_advantage():
    rows = action_rows(torch.zeros(2, 3), torch.tensor([1.0, -1.0]))
    assert rows.response_mask.shape == (2, 3)
    assert torch.equal(rows.advantages, torch.tensor([[1.0, 1, 1], [-1, -1, -1]]))


def test_clipped_value_loss_and_total():
    v_old, v_new, ret = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([1.0, 0.2, -0.1]), torch.tensor([1.2, 0.0, 0.3])
    assert float(clipped_value_loss(v_new, v_old, ret, 0.2).mean()) == pytest.approx(0.0833, abs=1e-4)
    assert float(clipped_value_loss(v_new, v_old, ret, None).mean()) == pytest.approx(0.0400, abs=1e-4)
    assert -0.3875 + 0.5 * float(clipped_value_loss(v_new, v_old, ret, 0.2).mean()) == pytest.approx(-0.3458, abs=1e-4)


def test_diagonal_gaussian():
    mean, log_std, a = torch.tensor([0.0, 0.5]), torch.tensor([0.0, -0.5]), torch.tensor([0.3, 0.1])
    assert float(diag_gaussian_logp(a, mean, log_std)) == pytest.approx(-1.6003, abs=1e-4)
    assert float(diag_gaussian_entropy(log_std)) == pytest.approx(2.3379, abs=1e-4)
    torch.manual_seed(0)
    samples = mean + torch.randn(200_000, 2) * log_std.exp()
    assert float(-diag_gaussian_logp(samples, mean, log_std).mean()) == pytest.approx(2.3379, abs=0.01)


def test_categorical_and_bernoulli():
    logits = torch.tensor([[0.0, math.log(3.0)]])
    assert float(categorical_logp(logits, torch.tensor([1]))) == pytest.approx(math.log(0.75), abs=1e-6)
    assert float(categorical_entropy(logits)) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    z = torch.tensor([0.0, math.log(4.0)])  # p = 0.5, 0.8
    assert torch.allclose(bernoulli_logp(z, torch.tensor([1, 0])), torch.tensor([math.log(0.5), math.log(0.2)]))
    assert float(bernoulli_entropy(z)[0]) == pytest.approx(math.log(2), abs=1e-6)


@pytest.mark.parametrize("kl, expected", [(0.03, 1e-3 / 1.5), (0.004, 1.5e-3), (0.01, 1e-3)])
def test_kl_adaptive_learning_rate(kl, expected):
    assert adapt_kl_lr(1e-3, kl, 0.01) == pytest.approx(expected)


def test_kl_adaptive_learning_rate_bounds():
    assert adapt_kl_lr(1.2e-6, 1.0, 0.01) == 1e-6
    assert adapt_kl_lr(9e-3, 0.0, 0.01) == 1e-2


# ---- mutation-testing kills

def test_categorical_entropy_is_over_the_last_dim_of_a_3d_tensor():
    # logits [2, 3, 4] constant along the last dim (value j along dim 1) → each row is uniform over 4: H = ln 4
    logits = torch.arange(3.0)[None, :, None].expand(2, 3, 4)
    torch.testing.assert_close(categorical_entropy(logits), torch.full((2, 3), math.log(4)))
