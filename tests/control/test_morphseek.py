"""MorphSeek: the tensor math (LDVN log-likelihood, Dice, Jacobian and folding, reward, KL, group advantages,
warping and field composition), the latent registration policy, ToyReg2D and its environment, and method
morphseek (configuration errors, a recipe run, a killed run resumed bit for bit)."""
import math

import numpy as np
import pytest
import torch

from polo.control.math.morphseek import (compose, folding_fraction, gaussian_kl, group_advantages, hard_dice,
                                         jacobian_det_2d, ldvn_divisor, ldvn_logp, registration_reward, smoothness,
                                         soft_dice_loss, to_pixels, warp)
from polo.core.registry import ConfigError
from polo.core.segment import masked_whiten
from polo.control.envs.toyreg2d import toyreg2d_dataset, toyreg2d_pairs
from polo.control.policies.base import CONTROL_POLICIES
from polo.train.checkpoint import checkpoint_steps
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer
from tests.control.kill_and_resume import assert_same_rows, killed_after, metrics_rows

ATOL = 1e-4
SMALL = ["iterations=4", "warmup_iterations=2", "warmup_batch=4", "batch=2", "latent_samples=3", "train_pairs=16",
         "test_pairs=8", "eval_every=1", "checkpoint_every=2"]


# ---------------------------------------------------------------------- (e) numbers
MU, SIGMA, Z = [0.0, 0.5, -0.5, 1.0], [1.0, 0.5, 2.0, 1.0], [0.1, 0.4, -1.0, 1.5]


@pytest.mark.parametrize("scale, expected", [("one", -3.8570), ("sqrt_n", -1.9285), ("n", -0.9643)])
def test_ldvn_log_likelihood_at_each_scale(scale, expected):
    mu, sigma, z = (torch.tensor([x]) for x in (MU, SIGMA, Z))
    assert ldvn_logp(z, mu, sigma.log(), tau=1.0, scale=scale).item() == pytest.approx(expected, abs=ATOL)


def test_ldvn_sums_over_every_latent_dim_and_folds_tau_into_the_std():
    mu, sigma, z = (torch.tensor(x).view(1, 1, 2, 2) for x in (MU, SIGMA, Z))
    assert ldvn_logp(z, mu, sigma.log(), 1.0, "one").item() == pytest.approx(-3.8570, abs=ATOL)
    tau = 0.5
    flat = ldvn_logp(z.view(1, 4), mu.view(1, 4), (tau * sigma).log().view(1, 4), 1.0, "sqrt_n")
    assert ldvn_logp(z, mu, sigma.log(), tau, "sqrt_n").item() == pytest.approx(flat.item(), abs=1e-5)
    assert ldvn_divisor(512, "sqrt_n") == pytest.approx(math.sqrt(512))


def test_ldvn_refuses_a_bad_scale_or_temperature():
    x = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="one, sqrt_n, n"):
        ldvn_logp(x, x, x, 1.0, "sqrt")
    with pytest.raises(ValueError, match="tau > 0"):
        ldvn_logp(x, x, x, 0.0)


def test_group_advantages_unbiased_and_population_std():
    reward = torch.tensor([0.02, 0.05, -0.01, 0.03])
    adv = group_advantages(reward[:, None], eps=1e-6)[:, 0]  # J = 4 candidates of one pair
    assert torch.allclose(adv, torch.tensor([-0.1000, 1.1000, -1.2999, 0.3000]), atol=ATOL)
    population = masked_whiten(reward, torch.ones(4), unbiased=False, eps=0.0)
    assert torch.allclose(population, torch.tensor([-0.1155, 1.2701, -1.5010, 0.3464]), atol=ATOL)


def test_group_advantages_are_per_pair_and_zero_for_equal_rewards():
    reward = torch.tensor([[0.3, 1.0], [0.3, 2.0], [0.3, 3.0]])  # [J=3, B=2]: pair 0 all equal
    adv = group_advantages(reward)
    assert torch.equal(adv[:, 0], torch.zeros(3))
    assert torch.allclose(adv[:, 1], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-5)


def test_reward_dice_gain_minus_folding():
    r = registration_reward(torch.tensor(0.7), torch.tensor(0.6), torch.tensor(0.01), w_dice=1.0, w_njd=-1.0)
    assert r.item() == pytest.approx(0.0900, abs=ATOL)


def test_hard_dice_of_offset_squares_and_edge_cases():
    a, b = torch.zeros(1, 4, 4), torch.zeros(1, 4, 4)
    a[0, 1:3, 0:2], b[0, 1:3, 1:3] = 1, 1
    assert hard_dice(a, b).item() == pytest.approx(0.5000, abs=ATOL)
    assert hard_dice(a, a).item() == 1.0
    assert hard_dice(torch.zeros(1, 4, 4), torch.zeros(1, 4, 4)).item() == 1.0  # both empty
    assert hard_dice(a, 1 - a).item() == 0.0
    assert hard_dice(a * 0.4, a).item() == 0.0  # 0.4 is outside (threshold 0.5)


def test_jacobian_determinant_and_folding_fraction():
    ux = torch.tensor([[0.0, 0.5, 0.0], [0.0, 1.5, 0.0], [0.0, 0.0, 0.0]])
    field = torch.stack([ux, torch.zeros(3, 3)])[None]
    assert torch.allclose(jacobian_det_2d(field)[0], torch.tensor([[1.5, 0.5], [2.5, -0.5]]), atol=ATOL)
    assert folding_fraction(field).item() == pytest.approx(0.2500, abs=ATOL)
    uy = ux.T.clone()  # the same bump along y
    assert torch.allclose(jacobian_det_2d(torch.stack([torch.zeros(3, 3), uy])[None])[0],
                          torch.tensor([[1.5, 2.5], [0.5, -0.5]]), atol=ATOL)
    with pytest.raises(ValueError, match=r"\[B, 2, H, W\]"):
        jacobian_det_2d(torch.zeros(1, 3, 3))


def test_jacobian_of_a_rotation_in_pixel_units_is_one():
    h = w = 9
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64),
                            indexing="ij")
    c, s = math.cos(0.3), math.sin(0.3)
    field = torch.stack([c * xs - s * ys - xs, s * xs + c * ys - ys])[None]  # rigid rotation, pixel units
    assert torch.allclose(jacobian_det_2d(field), torch.ones(1, h - 1, w - 1, dtype=torch.float64))
    norm = torch.full((1, 2, 5, 9), 0.5)
    assert torch.allclose(to_pixels(norm)[0, 0], torch.full((5, 9), 2.0))  # x: (W−1)/2 = 4
    assert torch.allclose(to_pixels(norm)[0, 1], torch.full((5, 9), 1.0))  # y: (H−1)/2 = 2


def test_warm_up_kl_smoothness_and_soft_dice():
    mean = torch.tensor([[0.0, 1.0, 0.0]])
    log_std = torch.tensor([[0.0, 0.0, math.log(2.0)]])
    expected = 0.0 + 0.5 + 0.5 * (4 - 1 - math.log(4))
    assert gaussian_kl(mean, log_std).item() == pytest.approx(expected, abs=ATOL)
    assert smoothness(torch.full((2, 2, 5, 5), 0.3)).tolist() == [0.0, 0.0]
    ramp = torch.arange(4.0).view(1, 1, 1, 4).expand(1, 2, 3, 4)
    assert smoothness(ramp).item() == pytest.approx(1.0)  # unit steps along x, none along y
    label = (torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    assert torch.allclose(soft_dice_loss(label, label), torch.zeros(2), atol=1e-6)
    assert soft_dice_loss(label, 1 - label).tolist() == pytest.approx([1.0, 1.0], abs=1e-6)


# ---------------------------------------------------------------------- warping and composition
def test_zero_field_is_the_identity_and_composition_with_it_changes_nothing():
    g = torch.Generator().manual_seed(1)
    image, u = torch.rand(2, 1, 8, 8, generator=g), 0.2 * torch.randn(2, 2, 8, 8, generator=g)
    zero = torch.zeros_like(u)
    assert torch.allclose(warp(image, zero), image, atol=1e-6)
    assert torch.allclose(compose(u, zero), u, atol=1e-6)
    assert torch.allclose(compose(zero, u), u, atol=1e-6)


def test_composition_warps_outer_first_then_inner():
    g = torch.Generator().manual_seed(2)
    image = torch.rand(1, 1, 16, 16, generator=g)
    shift_a, shift_b = torch.zeros(1, 2, 16, 16), torch.zeros(1, 2, 16, 16)
    shift_a[:, 0], shift_b[:, 1] = 2 * 2 / 15, -3 * 2 / 15  # two pixels along x, minus three along y
    both = compose(shift_a, shift_b)
    assert torch.allclose(both, shift_a + shift_b, atol=1e-6)  # constant fields add
    twice, once = warp(warp(image, shift_a), shift_b), warp(image, both)
    assert torch.allclose(twice[..., 3:, :-2], once[..., 3:, :-2], atol=1e-5)  # away from the padded border
    assert torch.allclose(once[0, 0, 5, 4], image[0, 0, 2, 6], atol=1e-5)  # I(x + 2, y − 3)


# ---------------------------------------------------------------------- the latent policy
def test_latent_policy_shapes_sampling_and_scores():
    gym = pytest.importorskip("gymnasium")
    obs_space, act_space = gym.spaces.Box(0, 1, (2, 32, 32)), gym.spaces.Box(-1, 1, (2, 32, 32))
    torch.manual_seed(0)
    net = CONTROL_POLICIES.build({"name": "latent", "tau": 0.5}).build(obs_space, act_space)
    assert net.latent_size == 512  # c_z = 8 on the 8×8 top
    pair = torch.rand(3, 2, 32, 32, generator=torch.Generator().manual_seed(0))
    skips, mean, log_std = net.encode(pair)
    assert mean.shape == log_std.shape == (3, 8, 8, 8)
    z1 = net.sample(mean, log_std, 6, torch.Generator().manual_seed(5))
    z2 = net.sample(mean, log_std, 6, torch.Generator().manual_seed(5))
    assert z1.shape == (6, 3, 8, 8, 8) and torch.equal(z1, z2) and not z1.requires_grad
    logp = net.log_prob(z1, mean, log_std)
    assert logp.shape == (6, 3)
    assert torch.allclose(logp[2], ldvn_logp(z1[2], mean, log_std, 0.5, "sqrt_n"), atol=1e-5)
    logp.sum().backward()  # REINFORCE: the gradient reaches μ and σ through log π, not through z
    assert net.mean_head.weight.grad.abs().sum() > 0 and net.log_std_head.weight.grad.abs().sum() > 0
    assert net.flow.weight.grad is None
    field = net.decode(skips, mean)
    assert field.shape == (3, 2, 32, 32) and field.abs().max() < 1e-2  # starts near the identity
    record = net.act(pair.flatten(1), deterministic=True)  # a flattened observation works too
    assert torch.equal(record["z"], mean.detach()) and record["action"].shape == (3, 2, 32, 32)
    score = net.evaluate(pair, record)
    assert torch.allclose(score.logp, record["logp"]) and score.entropy.shape == (3,)


def test_latent_policy_refuses_spaces_it_cannot_serve():
    gym = pytest.importorskip("gymnasium")
    settings = CONTROL_POLICIES.build("latent")
    with pytest.raises(ValueError, match="Box\\(2, H, W\\)"):
        settings.build(gym.spaces.Box(0, 1, (4,)), gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="multiples of 4"):
        settings.build(gym.spaces.Box(0, 1, (2, 30, 30)), gym.spaces.Box(-1, 1, (2, 30, 30)))
    with pytest.raises(ValueError, match="image-pair observation"):
        settings.build(gym.spaces.Box(0, 1, (1, 32, 32)), gym.spaces.Box(-1, 1, (2, 32, 32)))


# ---------------------------------------------------------------------- ToyReg2D
def test_toyreg2d_pairs_are_seeded_binary_labelled_and_misaligned():
    train, test = toyreg2d_dataset(3)
    assert len(train) == 512 and len(test) == 128 and train.moving.shape == (512, 1, 32, 32)
    again, _ = toyreg2d_dataset(3)
    assert torch.equal(train.moving, again.moving) and torch.equal(train.fixed_label, again.fixed_label)
    assert not torch.equal(toyreg2d_dataset(4)[0].moving, train.moving)
    assert set(train.moving_label.unique().tolist()) == {0.0, 1.0}
    assert 0.0 <= float(train.moving.min()) and float(train.moving.max()) <= 1.0
    dice = hard_dice(test.moving_label, test.fixed_label).mean().item()
    assert 0.4 < dice < 0.6  # the disc moves: unregistered label Dice ≈ 0.5
    with pytest.raises(ValueError, match="n >= 1"):
        toyreg2d_pairs(0, torch.Generator())


def test_toyreg2d_environment_one_step_episode():
    gym = pytest.importorskip("gymnasium")
    from polo.control.envs.registration import register_builtin_environments

    register_builtin_environments()
    env = gym.make("polo/ToyReg2D-v0")
    obs, info = env.reset(seed=7)
    assert obs.shape == (2, 32, 32) and obs.dtype == np.float32 and env.action_space.shape == (2, 32, 32)
    again, _ = env.reset(seed=7)
    assert np.array_equal(obs, again)
    _, reward, terminated, truncated, final = env.step(np.zeros((2, 32, 32), np.float32))
    assert terminated and not truncated and reward == 0.0
    assert final["dice"] == pytest.approx(info["dice"]) and final["njd"] == 0.0 and final["dice_gain"] == 0.0


# ---------------------------------------------------------------------- method morphseek
def test_configuration_errors_name_the_setting():
    with pytest.raises(ConfigError, match="policy latent"):
        load_control_recipe("morphseek", ["policy={name: gaussian}"])
    with pytest.raises(ConfigError, match="latent_samples"):
        load_control_recipe("morphseek", ["latent_samples=1"])
    with pytest.raises(ConfigError, match="leaves no GRPO loss"):
        load_control_recipe("morphseek", ["policy_term=false", "lambda_warm=0", "lambda_dice=0"])
    with pytest.raises(ConfigError, match="w_njd"):
        load_control_recipe("morphseek", ["w_njd=0.5"])


def test_recipe_smoke_run_and_ablation(tmp_path):
    run = tmp_path / "run"
    ControlTrainer(load_control_recipe("morphseek", SMALL), run, log=lambda m: None).run()
    out = metrics_rows(run)
    assert [r["step"] for r in out] == [0, 1, 2, 3, 4]
    assert [r["train/phase"] for r in out[1:]] == [0.0, 0.0, 1.0, 1.0]
    assert {"loss/warm", "loss/kl", "train/dice"} <= set(out[1])
    assert {"eval/dice", "eval/njd", "loss/policy", "loss/soft_dice", "train/reward", "policy/sigma"} <= set(out[-1])
    assert 0.0 <= out[-1]["eval/dice"] <= 1.0 and (run / "config.yaml").is_file() and checkpoint_steps(run)
    ablation = ControlTrainer(load_control_recipe("morphseek_no_policy", [*SMALL, "checkpoint_every=4"]),
                              tmp_path / "ablation", log=lambda m: None)
    assert ablation.headline == "eval/dice"
    ablation.run()
    assert metrics_rows(tmp_path / "ablation")[-1]["step"] == 4


@pytest.mark.parametrize("warmup", [1, 2])  # resumed inside GRPO, and right where GRPO starts (a fresh Adam)
def test_killed_run_resumes_bit_for_bit(tmp_path, warmup):
    trainer, whole, killed = killed_after("morphseek", [*SMALL, f"warmup_iterations={warmup}"], tmp_path, 2)
    trainer.run()
    assert_same_rows(killed, whole)


def test_ppo_can_drive_the_latent_policy_on_the_environment(tmp_path):
    recipe = load_control_recipe({
        "kind": "control", "name": "ppo_toyreg2d", "method": "ppo",
        "env": {"id": "polo/ToyReg2D-v0", "num_envs": 2, "normalize_obs": False, "normalize_reward": False},
        "engine": {"name": "gym", "num_steps": 4}, "policy": {"name": "latent", "tau": 0.1},
        "iterations": 1, "epochs": 1, "minibatches": 2, "eval_episodes": 2})
    out = ControlTrainer(recipe, tmp_path / "ppo", log=lambda m: None).run()
    assert {"eval/dice", "eval/njd", "policy/sigma"} <= set(out[-1])


# ---- mutation-testing kills
def test_ldvn_and_reward_defaults():
    mu, sigma, z = (torch.tensor([x]) for x in (MU, SIGMA, Z))
    assert ldvn_logp(z, mu, sigma.log()).item() == pytest.approx(-1.9285, abs=ATOL)  # tau 1, scale √N
    # R = 1·(0.7 − 0.6) − 1·0.01 = 0.09
    assert registration_reward(torch.tensor(0.7), torch.tensor(0.6), torch.tensor(0.01)).item() == pytest.approx(
        0.0900, abs=ATOL)


def test_kl_of_a_negative_mean_per_sample():
    mean = torch.tensor([[-1.0, 2.0], [0.0, 0.0]])
    log_std = torch.zeros(2, 2)
    # ½Σ μ² (σ = 1): ½(1 + 4) = 2.5 for sample 0, 0 for sample 1
    assert gaussian_kl(mean, log_std).tolist() == pytest.approx([2.5, 0.0], abs=ATOL)


def test_hard_dice_threshold_is_strict_and_a_single_pixel_against_empty():
    half, full, empty = torch.full((1, 2, 2), 0.5), torch.ones(1, 2, 2), torch.zeros(1, 2, 2)
    assert hard_dice(half, full).item() == 0.0  # 0.5 is outside: 2·0 / (0 + 4)
    assert hard_dice(full, half).item() == 0.0
    one = empty.clone()
    one[0, 0, 0] = 1
    assert hard_dice(one, empty).item() == 0.0  # 2·0 / (1 + 0)


def test_soft_dice_of_two_empty_maps_is_zero():
    # 1 − (0 + ε) / (0 + 0 + ε) = 0
    assert soft_dice_loss(torch.zeros(2, 1, 3, 3), torch.zeros(2, 1, 3, 3)).tolist() == [0.0, 0.0]


def test_smoothness_of_ramps_along_y_and_x_per_sample():
    ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(5.0), indexing="ij")
    ramp = (3 * ys + 0.5 * xs).expand(1, 2, 4, 5)
    field = torch.cat([ramp, 2 * ramp])  # [2, 2, 4, 5]
    # steps 3 along y and 0.5 along x: 3² + 0.5² = 9.25; doubled field: 4·9.25 = 37
    assert smoothness(field).tolist() == pytest.approx([9.25, 37.0], abs=ATOL)


def test_jacobian_refuses_three_channels_and_a_zero_determinant_folds():
    with pytest.raises(ValueError, match=r"\[B, 2, H, W\]"):
        jacobian_det_2d(torch.zeros(1, 3, 4, 4))
    field = torch.zeros(1, 2, 2, 2)
    field[0, 0, :, 1] = -1.0  # ∂u_x/∂x = −1: J = (1 − 1)(1 + 0) − 0 = 0, the map collapses → folds
    assert jacobian_det_2d(field).item() == 0.0
    assert folding_fraction(field).item() == 1.0


def test_warp_with_nearest_mode():
    image = torch.tensor([[[[0.0, 1.0, 2.0, 3.0]]]]).expand(1, 1, 2, 4).contiguous()
    field = torch.zeros(1, 2, 2, 4)
    field[:, 0] = 0.4 * 2 / 3  # 0.4 pixel along x (W − 1 = 3 → ×2/3 in normalised units)
    # nearest: x + 0.4 rounds back to x; bilinear would give x + 0.4 (border: 3)
    assert torch.equal(warp(image, field, mode="nearest"), image)
    assert torch.allclose(warp(image, field)[0, 0, 0], torch.tensor([0.4, 1.4, 2.4, 3.0]), atol=1e-5)
