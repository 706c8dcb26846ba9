"""generalized State-Dependent Exploration of the ``gaussian`` policy (``sde: true``): the marginal Gaussian it scores,
the exploration matrices (one per copy, held for sde_sample_freq calls, kept apart from other batch sizes, carried by
a checkpoint: tests/control/test_control_trainer.py resumes a killed run), deterministic acting, and its settings."""
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

from polo.core.registry import ConfigError
from polo.control.policies.base import CONTROL_POLICIES
from polo.control.policies.gaussian import DiagGaussianPolicy, StateDependentGaussianPolicy
from polo.control.recipe import load_control_recipe

OBS, ACT = Box(-1.0, 1.0, (3,), np.float32), Box(-2.0, 2.0, (2,), np.float32)


def build(**settings):
    torch.manual_seed(0)
    return CONTROL_POLICIES.build({"name": "gaussian", **settings}).build(OBS, ACT)


def marginal(policy, obs):
    """μ and the std ``sqrt(φ² σ² + ε)`` computed here from the layers."""
    phi = policy.mean[:-1](obs)
    sigma = policy.log_std.exp().expand(phi.shape[1], ACT.shape[0])
    return policy.mean[-1](phi), (phi.pow(2) @ sigma.pow(2) + 1e-6).sqrt()


@pytest.mark.parametrize("full_std", [True, False])
def test_logp_and_entropy_are_the_marginal_gaussians(full_std):
    policy = build(sde=True, full_std=full_std, log_std_init=-0.3)
    assert policy.log_std.shape == ((64, 2) if full_std else (64, 1))
    with torch.no_grad():
        policy.log_std.add_(0.1 * torch.randn(policy.log_std.shape))  # unequal σ entries
    obs = torch.randn(6, 3)
    g = torch.Generator().manual_seed(1)
    out = policy.act(obs, g)
    mean, std = marginal(policy, obs)
    normal = torch.distributions.Normal(mean, std)
    torch.testing.assert_close(out["logp"], normal.log_prob(out["action"]).sum(-1))
    score = policy.evaluate(obs, {"action": out["action"]})
    torch.testing.assert_close(score.logp, normal.log_prob(out["action"]).sum(-1))
    torch.testing.assert_close(score.entropy, normal.entropy().sum(-1))
    # one matrix per row: rows of one state sample that Gaussian (mean and std checked on 20k copies)
    many = build(sde=True, full_std=full_std, log_std_init=-0.3)
    one = obs[:1].expand(20_000, 3)
    actions = many.act(one, g)["action"]
    with torch.no_grad():
        m, s = marginal(many, obs[:1])
    torch.testing.assert_close(actions.mean(0), m[0], atol=4 * float(s.max()) / 141, rtol=0)
    torch.testing.assert_close(actions.std(0), s[0], rtol=0.03, atol=0)


def test_matrices_are_held_for_sample_freq_calls_then_redrawn():
    policy = build(sde=True, sde_sample_freq=3)
    obs = torch.randn(4, 3)
    obs[1] = obs[0]  # rows 0 and 1 see the same state: different matrices, different actions
    g = torch.Generator().manual_seed(2)
    a = [policy.act(obs, g)["action"] for _ in range(7)]
    assert not torch.equal(a[0][0], a[0][1])
    assert torch.equal(a[1], a[0]) and torch.equal(a[2], a[0])  # calls 1-3: the first matrices
    assert not torch.equal(a[3], a[0])  # call 4 draws anew
    assert torch.equal(a[4], a[3]) and torch.equal(a[5], a[3])
    assert not torch.equal(a[6], a[3]) and not torch.equal(a[6], a[0])


def test_deterministic_is_the_mean_and_other_batches_leave_the_matrices_alone():
    policy = build(sde=True, sde_sample_freq=2)
    obs, other = torch.randn(4, 3), torch.randn(10, 3)
    g = torch.Generator().manual_seed(3)
    first = policy.act(obs, g)["action"]
    before = policy.extra_state()
    torch.testing.assert_close(policy.act(obs, g, deterministic=True)["action"], marginal(policy, obs)[0])
    torch.testing.assert_close(policy.act(other, g, deterministic=True)["action"], marginal(policy, other)[0])
    assert not torch.equal(policy.act(other, g)["action"], policy.act(other, g)["action"])  # one-off matrices
    after = policy.extra_state()
    assert torch.equal(after["sde_eps"], before["sde_eps"]) and after["sde_calls"] == before["sde_calls"] == 1
    assert torch.equal(policy.act(obs, g)["action"], first)  # the 2nd call of the held matrices


def test_features_are_detached_in_the_variance_unless_learn_features():
    obs = torch.randn(5, 3)
    for learn, reaches in ((False, False), (True, True)):
        policy = build(sde=True, learn_features=learn)
        policy.evaluate(obs, {"action": torch.zeros(5, 2)}).entropy.sum().backward()
        grad = policy.mean[0].weight.grad
        assert (grad is not None and bool(grad.abs().sum() > 0)) == reaches
        assert bool(policy.log_std.grad.abs().sum() > 0)


def test_default_is_the_plain_gaussian_and_bad_settings_fail():
    assert type(build()) is DiagGaussianPolicy and not hasattr(build(), "extra_state")
    sde = build(sde=True)
    assert isinstance(sde, StateDependentGaussianPolicy)
    assert set(sde.state_dict()) == set(build().state_dict())
    with pytest.raises(ConfigError, match="sde_sample_freq"):
        load_control_recipe("ppo_continuous", ["policy.sde=true", "policy.sde_sample_freq=0"])
