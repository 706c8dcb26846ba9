"""PolicyFlow: the flow math (every number of the spec's unit-test block), the flow policy's contract (ρ = 1 at the
start of an update, Gaussian limit, frozen copy), the recipes (smoke, resume bit for bit) and a short learning run."""
import json
import math

import pytest
import torch

from polo.control.math.distributions import diag_gaussian_entropy, diag_gaussian_logp
from polo.control.math.flow import (brownian_penalty, clamp_log_std, delta_gaussian_kl, interpolate,
                                    midpoint_integrate, ratio_times, solver_times)
from polo.core.registry import ConfigError
from polo.control.envs.registration import gymnasium
from polo.control.policies.base import CONTROL_POLICIES
from polo.train.checkpoint import latest_checkpoint, load_checkpoint
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer, resume_control
from tests.control.kill_and_resume import without_timing

X0, A_PRIOR = torch.tensor([0.5, -1.0]), torch.tensor([1.5, 0.5])


# ---------------------------------------------------------------------------------------------- flow math
def test_rectified_and_trigflow_paths():
    assert interpolate("rectified_flow", X0, A_PRIOR, torch.tensor(0.25)).tolist() == pytest.approx([0.75, -0.625], abs=1e-4)
    assert interpolate("trigflow", X0, A_PRIOR, torch.tensor(math.pi / 8)).tolist() == pytest.approx([1.0360, -0.7325], abs=1e-4)


def test_stochastic_interpolant_adds_scaled_noise_and_needs_it():
    eps = torch.tensor([1.0, -2.0])
    t = torch.tensor(0.25)
    out = interpolate("stochastic_interpolant", X0, A_PRIOR, t, eps)
    base = interpolate("rectified_flow", X0, A_PRIOR, t)
    assert (out - base).tolist() == pytest.approx((math.sqrt(2 * 0.25 * 0.75) * eps).tolist(), abs=1e-6)
    # the 1 − t factor is floored at 1e-6: the path still carries a little noise at t = 1
    end = interpolate("stochastic_interpolant", X0, A_PRIOR, torch.tensor(1.0), eps)
    assert (end - A_PRIOR).tolist() == pytest.approx((math.sqrt(2e-6) * eps).tolist(), abs=1e-7)
    with pytest.raises(ValueError, match="noise"):
        interpolate("stochastic_interpolant", X0, A_PRIOR, t)


def test_unknown_interpolation_is_named():
    with pytest.raises(ValueError, match="'straight'.*rectified_flow"):
        interpolate("straight", X0, A_PRIOR, torch.tensor(0.5))


def test_shifted_delta_gaussian_ratio_and_kl():
    delta = torch.tensor([0.1, -0.2])
    sigma_old, sigma_new, shift = torch.tensor([0.5, 0.5]), torch.tensor([0.45, 0.55]), torch.tensor([0.05, -0.1])
    logp_old = diag_gaussian_logp(delta, torch.zeros(2), sigma_old.log())
    logp_new = diag_gaussian_logp(delta, shift, sigma_new.log())
    assert float(logp_old) == pytest.approx(-0.5516, abs=1e-4)
    assert float(logp_new) == pytest.approx(-0.4642, abs=1e-4)
    assert float((logp_new - logp_old).exp()) == pytest.approx(1.0913, abs=1e-4)
    assert float(delta_gaussian_kl(sigma_old, sigma_new, shift)) == pytest.approx(0.0432, abs=1e-4)


def test_kl_of_equal_gaussians_is_the_epsilon_in_the_log_only():
    sigma = torch.tensor([[0.3, 1.7]])
    assert float(delta_gaussian_kl(sigma, sigma, torch.zeros(1, 2))) == pytest.approx(2 * math.log(1 + 1e-5), abs=1e-7)  # float32


def test_brownian_penalty_forms():
    t = torch.tensor(0.25)
    xt = interpolate("rectified_flow", X0, A_PRIOR, t)
    v_new, v_old = torch.tensor([0.8, 1.2]), torch.tensor([1.0, 1.5])
    assert float(brownian_penalty("rectified_flow", v_new, v_old, xt, t).mean()) == pytest.approx(1.8100, abs=1e-4)
    assert float(brownian_penalty("stochastic_interpolant", v_new, v_old, xt, t).mean()) == pytest.approx(1.53125, abs=1e-4)
    trig = brownian_penalty("trigflow", v_new, v_old, xt, t)
    expected = (math.cos(0.25) * v_new - (math.cos(0.25) * xt - math.sin(0.25) * v_old)) ** 2
    assert trig.tolist() == pytest.approx(expected.tolist(), abs=1e-6)


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.0])
def test_brownian_fixed_point_for_general_beta(beta):
    """With v_old = v_new = β·x_t/(1 − t + β·t) the rectified residual vanishes (v = x_t at β = 1)."""
    t = torch.tensor([0.0, 0.3, 0.7, 1.0])
    xt = torch.tensor([[1.0, -2.0], [0.5, 0.2], [-1.5, 3.0], [2.0, 0.1]])
    v = beta * xt / (1 - t[:, None] + beta * t[:, None])
    assert brownian_penalty("rectified_flow", v, v, xt, t, beta).abs().max() < 1e-6
    off = brownian_penalty("rectified_flow", v + 0.1, v, xt, t, beta)
    assert off[:3].min() > 0 and off[3].abs().max() < 1e-6  # at t = 1 the residual does not weigh v_new


def test_time_grids():
    grid = ratio_times(10)
    assert grid.shape == (21,) and grid.tolist() == pytest.approx([i * 0.05 for i in range(21)], abs=1e-6)
    assert solver_times(10).tolist() == pytest.approx([i * 0.1 for i in range(11)], abs=1e-6)
    assert float(ratio_times(4, "trigflow")[-1]) == pytest.approx(math.pi / 2)
    with pytest.raises(ValueError, match="steps=0"):
        solver_times(0)


def test_midpoint_integrator():
    out = midpoint_integrate(lambda x, t: 0.5 - x, torch.ones(1, 1), solver_times(2))
    assert float(out) == pytest.approx(0.6953, abs=1e-4)
    assert 0.5 + 0.5 * math.exp(-1) == pytest.approx(0.6839, abs=1e-4)  # the exact solution the 2 steps approximate


def test_integrator_passes_time_per_row():
    seen = []
    midpoint_integrate(lambda x, t: seen.append(t.tolist()) or torch.zeros_like(x), torch.zeros(3, 1), solver_times(2))
    assert seen == [[0.0] * 3, [0.25] * 3, [0.5] * 3, [0.75] * 3]


def test_log_std_clamp():
    std = clamp_log_std(torch.tensor([3.0, -6.0, 0.5])).exp()
    assert std.tolist() == pytest.approx([7.3891, 0.0067, math.exp(0.5)], abs=1e-4)


# ---------------------------------------------------------------------------------------------- the policy
def build(obs_dim=3, act_dim=2, seed=0, **settings):
    gym = gymnasium()
    torch.manual_seed(seed)
    return CONTROL_POLICIES.build({"name": "flow", **settings}, "policy").build(
        gym.spaces.Box(-1, 1, (obs_dim,)), gym.spaces.Box(-2, 2, (act_dim,)))


def act_then_perturb(policy, obs):
    """The record of acting on ``obs``, after which the velocity field moves a little (as an update would)."""
    with torch.no_grad():
        record = policy.act(obs)
        for p in policy.field.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return record


def rows(record, index):
    return {k: v[index] for k, v in record.items()}


@pytest.mark.parametrize("interpolation", ["rectified_flow", "trigflow", "stochastic_interpolant"])
def test_ratio_is_exactly_one_before_the_first_step(interpolation):
    policy = build(interpolation=interpolation, steps=4)
    obs = torch.randn(64, 3)
    with torch.no_grad():
        record = policy.act(obs)
    index = torch.randperm(64)[:16]
    score = policy.evaluate(obs[index], rows(record, index))
    assert torch.equal(score.logp, record["logp"][index])  # Δv = 0 and σ = σ_old bit for bit: ρ = 1 exactly
    assert score.kl.tolist() == pytest.approx([2 * math.log(1 + 1e-5)] * 16, abs=1e-7)
    assert score.entropy.tolist() == pytest.approx(diag_gaussian_entropy(torch.zeros(16, 2)).tolist(), abs=1e-6)
    assert score.aux_loss is not None and score.aux_loss.requires_grad


def test_record_and_deterministic_action():
    policy = build()
    obs = torch.randn(5, 3)
    record = policy.act(obs, torch.Generator().manual_seed(1))
    assert set(record) == {"action", "logp", "x0", "a_prior", "delta", "sigma_old"}
    assert torch.allclose(record["action"], record["a_prior"] + record["delta"])
    assert torch.allclose(record["logp"], diag_gaussian_logp(record["delta"], torch.zeros(5, 2), record["sigma_old"].log()))
    det = policy.act(obs, torch.Generator().manual_seed(1), deterministic=True)
    assert torch.equal(det["action"], det["a_prior"]) and not det["delta"].any()
    assert torch.equal(det["x0"], record["x0"])  # the same noise x0; only δ is dropped


def test_frozen_copy_is_not_a_parameter_and_end_update_refreshes_it():
    policy = build()
    names = [n for n, _ in policy.named_parameters()]
    assert names and not any(n.startswith("last.") for n in names)
    state = policy.state_dict()
    assert any(k.startswith("last.net.") for k in state)
    assert {k[len("last."):] for k in state if k.startswith("last.")} == {k[len("field."):] for k in state if k.startswith("field.")}
    obs = torch.randn(32, 3)
    record = act_then_perturb(policy, obs)
    moved = policy.evaluate(obs, record)
    assert not torch.equal(moved.logp, record["logp"]) and float(moved.kl.mean()) > 1e-4
    policy.end_update()
    for key, value in policy.field.state_dict().items():
        assert torch.equal(policy.last.state_dict()[key], value)
    with torch.no_grad():
        record = policy.act(obs)
    assert torch.equal(policy.evaluate(obs, record).logp, record["logp"])


def test_gradient_reaches_the_field_and_std_only():
    policy = build()
    obs = torch.randn(16, 3)
    record = act_then_perturb(policy, obs)
    score = policy.evaluate(obs, record)
    (score.logp.mean() + score.aux_loss).backward()
    assert all(p.grad is not None for p in policy.parameters())
    assert all(b.grad is None and not b.requires_grad for b in policy.last.buffers())


def test_degenerate2gaussian_is_gaussian_ppo():
    """x0 = 0: a_prior is a function of the state, the action N(a_prior, σ²); when the velocity does not depend on x,
    a shift b of its output shifts the ODE's end point by b exactly, and logp_new is the Gaussian log-prob of the
    stored action under the new mean."""
    policy = build(degenerate2gaussian=True)
    with torch.no_grad():
        policy.field.net[0].weight[:, :2] = 0  # the velocity ignores x (the first 2 inputs)
    policy.end_update()
    obs = torch.randn(8, 3)
    with torch.no_grad():
        record = policy.act(obs)
    assert not record["x0"].any()
    log_std = policy.log_std.detach().expand(8, 2)
    assert torch.allclose(record["logp"], diag_gaussian_logp(record["action"], record["a_prior"], log_std), atol=1e-5)
    with torch.no_grad():
        policy.field.net[-1].bias.add_(torch.tensor([0.3, -0.2]))
        policy.log_std.add_(torch.tensor([0.1, -0.1]))
        new_mean = policy.act(obs, deterministic=True)["a_prior"]
    assert torch.allclose(new_mean, record["a_prior"] + torch.tensor([0.3, -0.2]), atol=1e-5)
    score = policy.evaluate(obs, record)
    new_log_std = policy.log_std.detach().expand(8, 2)
    assert torch.allclose(score.logp, diag_gaussian_logp(record["action"], new_mean, new_log_std), atol=1e-5)
    assert score.aux_loss is None  # no Brownian term in the Gaussian limit


def test_generator_state_round_trip():
    policy = build()
    obs = torch.randn(16, 3)
    record = act_then_perturb(policy, obs)
    state = policy.extra_state()
    first = policy.evaluate(obs, record).logp
    policy.load_extra_state(state)
    assert torch.equal(policy.evaluate(obs, record).logp, first)


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="embed_dim"):
        build(embed_dim=4)
    with pytest.raises(ConfigError, match="policy.interpolation"):
        CONTROL_POLICIES.build({"name": "flow", "interpolation": "linear"}, "policy")
    gym = gymnasium()
    with pytest.raises(ConfigError, match="Box action space"):
        CONTROL_POLICIES.build({"name": "flow"}, "policy").build(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(3))


# ---------------------------------------------------------------------------------------------- recipes
SMALL = {
    "policyflow_bandit": ["env.num_envs=16", "engine.num_steps=2", "eval_episodes=20", "iterations=2"],
    "ppo_bandit": ["env.num_envs=16", "engine.num_steps=2", "eval_episodes=20", "iterations=2"],
    "policyflow_pendulum": ["env.num_envs=2", "engine.num_steps=16", "total_steps=32", "eval_episodes=2"],
}


def train(recipe, run_dir, extra=()):
    overrides = [*SMALL[recipe], "eval_every=1", "checkpoint_every=1", *extra]
    return ControlTrainer(load_control_recipe(recipe, overrides), run_dir, log=lambda *_: None).run()


@pytest.mark.parametrize("recipe", sorted(SMALL))
def test_recipe_smoke(recipe, tmp_path):
    rows_ = train(recipe, tmp_path / "run")
    last = rows_[-1]
    assert {"eval/return", "loss/policy", "loss/value", "policy/kl", "optim/lr"} <= set(last)
    if recipe.startswith("policyflow"):
        assert {"policy/delta_v", "policy/std"} <= set(last)
    if recipe == "policyflow_bandit":
        assert {"loss/aux", "policy/brownian"} <= set(last)  # the Pendulum recipe has no Brownian term
    if recipe.endswith("bandit"):
        assert {"eval/goal_left", "eval/goal_right", "eval/near_goal"} <= set(last)
    assert latest_checkpoint(tmp_path / "run") is not None and (tmp_path / "run" / "config.yaml").is_file()


def test_policyflow_resume_bit_for_bit(tmp_path):
    straight = train("policyflow_bandit", tmp_path / "a", ["iterations=4", "checkpoint_every=2"])
    train("policyflow_bandit", tmp_path / "b", ["iterations=2", "checkpoint_every=2"])
    resumed = resume_control(tmp_path / "b", log=lambda *_: None, overrides=["iterations=4"]).run()
    assert without_timing(resumed) == without_timing(straight)
    wa, _ = load_checkpoint(latest_checkpoint(tmp_path / "a"))
    wb, _ = load_checkpoint(latest_checkpoint(tmp_path / "b"))
    assert any(k.startswith("last.") for k in wa["policy"])
    for part in wa:
        for key in wa[part]:
            assert torch.equal(wa[part][key], wb[part][key]), (part, key)


def test_bandit_learns_both_goals(tmp_path):
    """Seed 0, 40 iterations of the shipped recipe: deterministic-action reward ≥ 0.8 over 500 samples and each goal
    reached by ≥ 20 % of them (the full 150-iteration run reaches ≈ 0.99 and ≈ 50/50, docs/control.md)."""
    recipe = load_control_recipe("policyflow_bandit", ["iterations=40", "eval_every=40", "checkpoint_every=40",
                                                       "eval_episodes=500"])
    last = ControlTrainer(recipe, tmp_path / "run", log=lambda *_: None).run()[-1]
    assert last["eval/return"] >= 0.8
    assert last["eval/goal_left"] >= 0.2 and last["eval/goal_right"] >= 0.2, json.dumps(last)


# ---- mutation-testing kills

def test_flow_errors_name_the_choices_and_the_missing_input():
    with pytest.raises(ValueError, match=r"^interpolation 'ddpm': expected one of rectified_flow, trigflow, "
                                         r"stochastic_interpolant$"):
        solver_times(4, "ddpm")
    with pytest.raises(ValueError, match=r"^steps=0: the ODE needs at least one step$"):
        ratio_times(0)
    with pytest.raises(ValueError, match=r"^the stochastic_interpolant path needs noise ε of x0's shape$"):
        interpolate("stochastic_interpolant", torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([0.5]))


def test_one_step_grids():
    # K = 1 is allowed: grid [0, t_end], ratio times [0, t_end/2, t_end]
    torch.testing.assert_close(solver_times(1), torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(ratio_times(1, "trigflow"), torch.tensor([0.0, math.pi / 4, math.pi / 2]))


def test_midpoint_integrate_passes_one_time_per_point_for_leading_batch_dims():
    # x0 [2, 3, 1] (two leading batch dims), v(x, t) = t (per point): one midpoint step over [0, 1] evaluates v at
    # t = 0.5 → x = x0 + 0.5; the field gets t of shape x.shape[:-1] = [2, 3]
    seen = []

    def velocity(x, t):
        seen.append(tuple(t.shape))
        return t[..., None].expand_as(x)

    out = midpoint_integrate(velocity, torch.zeros(2, 3, 1), solver_times(1))
    assert seen == [(2, 3), (2, 3)]
    torch.testing.assert_close(out, torch.full((2, 3, 1), 0.5))
