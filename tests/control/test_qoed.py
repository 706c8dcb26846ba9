"""QOED: the Fisher-information objectives and the identifiable-set selection (every number of the spec's unit-test
block), the UnicycleID model, the MPPI planner, and the ``qoed`` recipes (smoke run, resume bit for bit)."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from polo.control.math.qoed import (agnostic_objective, boed_objective, cem_minimize, central_jacobian, fd_steps,
                                    fisher_information, gaussian_posterior_cov, identifiable_mask, information,
                                    mppi_update, mppi_weights, perturbed_thetas, schur_objective, step_bonus)
from polo.core.registry import ConfigError
from polo.control.envs.unicycle_id import (THETA_MIN, THETA_PRIOR_MEAN, THETA_PRIOR_STD, UnicycleID,
                                           identifiable_parameters, mass_ratios, observation_difference,
                                           unicycle_observe, unicycle_step)
from polo.control.policies.mppi import MPPIPlanner, MPPISettings
from tests.control.kill_and_resume import assert_same_rows

D = torch.float64
J = torch.tensor([[1.0, 0.5, 0.0], [0.2, 1.0, 0.0], [0.5, 0.5, 0.001]], dtype=D)
SIGMA = 0.05


def fim(jac: torch.Tensor) -> torch.Tensor:
    return fisher_information(jac, SIGMA)


def twin(jac: torch.Tensor) -> torch.Tensor:
    """Two parameters acting only through their sum: the first column duplicated."""
    return torch.stack([jac[:, 0], jac[:, 0], jac[:, 1], jac[:, 2]], 1)


def observable_scores(f: torch.Tensor, eig_ratio: float = 0.01) -> torch.Tensor:
    vals, vecs = torch.linalg.eigh(f)
    return vecs[:, vals >= eig_ratio * vals.max()].square().sum(1)


# ---------------------------------------------------------------------------------------------- spec numbers
def test_fisher_matrix_and_trace():
    f = fim(J)
    expected = torch.tensor([[516, 380, 0.2], [380, 600, 0.2], [0.2, 0.2, 0.0004]], dtype=D)
    assert torch.allclose(f, expected, atol=1e-4)
    assert torch.equal(f, f.T)
    assert float(boed_objective(f)) == pytest.approx(1116.0004, abs=1e-4)


def test_eigenvalues_scores_and_mask():
    f = fim(J)
    vals = torch.linalg.eigvalsh(f).flip(0)
    assert torch.allclose(vals, torch.tensor([940.3141, 175.6860, 0.0003], dtype=D), atol=1e-4)
    assert int((vals >= 0.01 * vals[0]).sum()) == 2  # n_obs
    assert torch.allclose(observable_scores(f), torch.tensor([1.0, 1.0, 0.0], dtype=D), atol=1e-4)
    assert identifiable_mask(f).tolist() == [True, True, False]


def test_objectives_on_the_spec_matrix():
    f = fim(J)
    mask = identifiable_mask(f)
    assert float(agnostic_objective(f, mask)) == pytest.approx(1116.0000, abs=1e-4)
    assert float(schur_objective(f, mask)) == pytest.approx(1058.8571, abs=1e-4)
    # the weakly coupled nuisance removes F_iN² / (F_NN + ridge) = 0.04 / 0.0014 from each kept diagonal entry
    assert float(boed_objective(f) - f[2, 2] - schur_objective(f, mask)) == pytest.approx(2 * 0.04 / 0.0014, abs=1e-4)


def test_duplicated_gain_keeps_exactly_one_twin():
    f2 = fim(twin(J))
    vals = torch.linalg.eigvalsh(f2).flip(0)
    assert torch.allclose(vals, torch.tensor([1395.1857, 236.8144, 0.0003, 0.0], dtype=D), atol=1e-4)
    assert torch.allclose(observable_scores(f2), torch.tensor([0.5, 0.5, 1.0, 0.0], dtype=D), atol=1e-4)
    mask = identifiable_mask(f2)
    assert mask.tolist() == [False, True, True, False]
    assert float(boed_objective(f2)) == pytest.approx(1632.0004, abs=1e-4)
    assert float(agnostic_objective(f2, mask)) == pytest.approx(1116.0000, abs=1e-4)
    assert float(schur_objective(f2, mask)) == pytest.approx(318.0554, abs=1e-4)


def test_duplicated_gain_property_in_float32():
    """Which twin survives is a floating-point tie; that exactly one does is the property."""
    mask = identifiable_mask(fim(twin(J.float())))
    assert int(mask[:2].sum()) == 1 and bool(mask[2]) and not bool(mask[3])


def test_zero_column_leaves_qoed_and_the_other_columns_mask_unchanged():
    """An unidentifiable parameter (a zero column of J) never enters S, and neither the QOED value nor the mask of
    the other columns moves; its FIM row and column are zero, so tr F does not move either (the spec's
    "changes BOED" holds for the duplicated column of the test above, not for a zero column)."""
    f, f0 = fim(J), fim(torch.cat([J, torch.zeros(3, 1, dtype=D)], 1))
    mask, mask0 = identifiable_mask(f), identifiable_mask(f0)
    assert mask0[:3].tolist() == mask.tolist() and not bool(mask0[3])
    assert float(schur_objective(f0, mask0)) == pytest.approx(float(schur_objective(f, mask)), abs=1e-4)
    assert float(agnostic_objective(f0, mask0)) == pytest.approx(float(agnostic_objective(f, mask)), abs=1e-4)
    assert float(boed_objective(f0)) == pytest.approx(float(boed_objective(f)), abs=1e-4)


def test_step_bonus_numbers():
    g = torch.tensor([0.5, 0.2, 0.05], dtype=D)
    trace = torch.tensor(7.0, dtype=D)
    assert float(step_bonus(g, trace, "agnostic")) == pytest.approx(0.5, abs=1e-4)
    assert float(step_bonus(g, trace, "qoed")) == pytest.approx(0.001992, abs=1e-6)
    assert float(step_bonus(g, trace, "boed")) == 7.0
    weak = torch.tensor([0.05, 0.01, 0.0], dtype=D)  # Σg ≤ 0.1: not identifiable
    assert float(step_bonus(weak, trace, "agnostic")) == 0.0 and float(step_bonus(weak, trace, "qoed")) == 0.0
    batch = torch.stack([g, weak])
    assert step_bonus(batch, torch.zeros(2, dtype=D), "qoed").shape == (2,)
    with pytest.raises(ConfigError, match="boed, qoed or agnostic"):
        step_bonus(g, trace, "none")


def test_finite_difference_steps():
    steps = fd_steps(torch.tensor([20.0, 1.0, 0.0], dtype=D))
    assert torch.allclose(steps, torch.tensor([0.21, 0.02, 0.01], dtype=D), atol=1e-12)


# ---------------------------------------------------------------------------------------------- edge cases
def test_schur_edge_cases_and_batching():
    f = fim(J)
    assert float(schur_objective(f, torch.ones(3, dtype=torch.bool))) == pytest.approx(float(boed_objective(f)))
    assert float(schur_objective(f, torch.zeros(3, dtype=torch.bool))) == 0.0
    batch = torch.stack([f, 2 * f, fim(J * 0.5)])  # K = 3 candidate FIMs
    mask = torch.tensor([True, True, False])
    out = schur_objective(batch, mask)
    assert out.shape == (3,)
    assert torch.allclose(out, torch.stack([schur_objective(b, mask) for b in batch]))
    for name, expect in (("boed", boed_objective(batch)), ("agnostic", agnostic_objective(batch, mask)),
                         ("qoed", out), ("none", torch.zeros(3, dtype=D))):
        assert torch.allclose(information(batch, mask, name), expect)
    with pytest.raises(ConfigError, match="objective must be one of"):
        information(batch, mask, "trace")


def test_selection_floor_inactive_and_bad_input():
    f = fim(J)
    assert not identifiable_mask(f * 1e-4).any()  # λ_1 ≤ eig_floor: nothing identifiable
    settled = torch.tensor([1.0, 1e-4, 1.0], dtype=D)  # parameter 1 is settled (variance below 0.0025)
    mask = identifiable_mask(f, torch.diag(settled))
    assert mask.tolist() == [True, False, False]
    assert identifiable_mask(f, settled).tolist() == mask.tolist()  # the diagonal alone works too
    with pytest.raises(ValueError, match="non-finite"):
        identifiable_mask(torch.full((3, 3), float("nan"), dtype=D))
    with pytest.raises(ValueError, match="one square FIM"):
        identifiable_mask(torch.stack([f, f]))


def test_central_jacobian_of_a_linear_map():
    a = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, 1.0]], dtype=D)
    theta = torch.tensor([0.3, -1.0, 2.0], dtype=D)
    steps = fd_steps(theta)
    thetas = perturbed_thetas(theta, steps)
    assert thetas.shape == (6, 3)
    y = (thetas @ a.T)[:, None, :].expand(6, 4, 2)  # a batch of 4 identical outputs
    jac = central_jacobian(y, steps)
    assert jac.shape == (4, 2, 3) and torch.allclose(jac, a.expand(4, 2, 3))
    with pytest.raises(ValueError, match="2p = 6"):
        central_jacobian(y[:5], steps)


def test_mppi_weights_and_update():
    costs = torch.tensor([3.0, 1.0, 2.0], dtype=D)
    w = mppi_weights(costs, 1.0)
    assert float(w.sum()) == pytest.approx(1.0) and int(w.argmax()) == 1
    assert torch.allclose(w, torch.softmax(-(costs - 1.0), 0))
    assert torch.allclose(mppi_weights(torch.ones(4, dtype=D), 1e-3), torch.full((4,), 0.25, dtype=D))
    assert float(mppi_weights(torch.tensor([5.0], dtype=D), 1e-3)) == 1.0
    w = mppi_weights(torch.tensor([1.0, float("nan"), float("inf")], dtype=D), 1.0)
    assert w.tolist() == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="non-finite"):
        mppi_weights(torch.tensor([float("nan")], dtype=D), 1.0)
    controls = torch.tensor([[[2.0]], [[-0.5]]], dtype=D)  # K = 2, H = 1, d_u = 1
    low, high = torch.tensor([-1.0], dtype=D), torch.tensor([1.0], dtype=D)
    assert float(mppi_update(controls, torch.tensor([0.0, 100.0], dtype=D), 1e-3, low, high)) == 1.0  # clamped
    assert float(mppi_update(controls, torch.tensor([0.0, 0.0], dtype=D), 1e-3, low, high)) == pytest.approx(0.75)


def test_cem_finds_a_quadratic_minimum_and_keeps_frozen_entries():
    target = torch.tensor([1.0, -2.0, 3.0], dtype=D)
    gen = torch.Generator().manual_seed(0)
    frozen = torch.tensor([False, False, True])
    mean = cem_minimize(lambda t: (t - target).square().sum(1), torch.zeros(3, dtype=D), torch.full((3,), 3.0, dtype=D),
                        gen, samples=512, elites=64, iterations=8, low=-10.0, high=10.0, frozen=frozen)
    assert torch.allclose(mean[:2], target[:2], atol=0.05) and float(mean[2]) == 0.0
    with pytest.raises(ConfigError, match="elites"):
        cem_minimize(lambda t: t.sum(1), mean, mean, gen, samples=4, elites=5, iterations=1, low=-1.0, high=1.0)


def test_posterior_covariance_update():
    cov = torch.diag(torch.tensor([4.0, 0.25, 1e-4], dtype=D))
    fisher = torch.tensor([1.0, 4.0, 100.0], dtype=D)
    active = torch.tensor([True, True, False])
    post = gaussian_posterior_cov(cov, fisher, active)
    assert torch.allclose(torch.diagonal(post), torch.tensor([1 / (0.25 + 1), 1 / (4 + 4), 1e-4], dtype=D), atol=1e-8)
    assert torch.equal(post[2], cov[2]) and torch.equal(post[:, 2], cov[:, 2])
    tiny = gaussian_posterior_cov(torch.diag(torch.tensor([1e-12], dtype=D)), torch.tensor([1e6], dtype=D),
                                  torch.tensor([True]))
    assert float(tiny) >= 1e-10


# ---------------------------------------------------------------------------------------------- UnicycleID
def test_unicycle_model_equations_and_gain_sum():
    s = torch.tensor([0.5, -0.2, 0.3, 1.2, 0.4], dtype=D)
    u = torch.tensor([0.7, -0.3], dtype=D)
    theta = torch.tensor([18.0, 0.9, 20.0, 25.0, 22.0, 24.0, 3.0, 1.5], dtype=D)
    dt, L = 0.1, 0.37559
    k = 0.5 * 91.0
    v = 1.2 + dt * (k * 0.7 - 0.9 * 1.2 - 3.0) / 18.0
    w = 0.4 + dt * 0.5 * L * (k * -0.3 + 1.5) / (0.5 * 18.0 * L * L)
    expected = [0.5 + dt * v * math.cos(0.3), -0.2 + dt * v * math.sin(0.3), 0.3 + dt * w, v, w]
    nxt = unicycle_step(s, u, theta, dt)
    assert torch.allclose(nxt, torch.tensor(expected, dtype=D), atol=1e-12)
    moved = theta.clone()
    moved[2:6] = torch.tensor([40.0, 5.0, 22.0, 24.0], dtype=D)  # same sum of wheel gains
    assert torch.allclose(unicycle_step(s, u, moved, dt), nxt, atol=1e-12)
    assert torch.allclose(identifiable_parameters(moved), identifiable_parameters(theta))
    scaled = theta.clone()
    scaled *= 1.7  # one common scale of every parameter: the same motion
    assert torch.allclose(unicycle_step(s, u, scaled, dt), nxt, atol=1e-12)
    assert torch.allclose(mass_ratios(scaled), mass_ratios(theta))
    y = unicycle_observe(nxt)
    assert torch.allclose(y[3:5], nxt[3] * torch.stack([torch.cos(nxt[2]), torch.sin(nxt[2])]))
    # broadcasting: 3 parameter vectors × 4 states
    out = unicycle_step(s.expand(4, 5), u.expand(4, 2), theta.expand(3, 1, 8), dt)
    assert out.shape == (3, 4, 5)


def test_observation_difference_wraps_yaw():
    a = torch.tensor([0.0, 0.0, 3.1, 0, 0, 0], dtype=D)
    b = torch.tensor([0.0, 0.0, -3.1, 0, 0, 0], dtype=D)
    assert float(observation_difference(a, b)[2]) == pytest.approx(6.2 - 2 * math.pi)


def test_environment_draws_theta_and_is_seeded():
    env = UnicycleID()
    obs, info = env.reset(seed=3)
    z = np.random.Generator(np.random.PCG64(3)).standard_normal(8)  # gymnasium seeds PCG64 with the seed
    expect = np.maximum(np.asarray(THETA_PRIOR_MEAN) + np.asarray(THETA_PRIOR_STD) * z, THETA_MIN)
    assert np.allclose(info["theta"], expect) and obs.shape == (6,)
    other = UnicycleID()
    other.reset(seed=3)
    for _ in range(3):
        a, b = env.step([1.0, 0.3]), other.step([1.0, 0.3])
        assert np.array_equal(a[0], b[0]) and a[1] == b[1]
    assert a[4]["goal_distance"] == pytest.approx(-a[1])
    short = UnicycleID(max_steps=2)
    short.reset(seed=0)
    assert not short.step([0, 0])[3] and short.step([0, 0])[3]


def test_environment_is_registered():
    from polo.control.envs.registration import gymnasium, register_builtin_environments

    register_builtin_environments()
    env = gymnasium().make("polo/UnicycleID-v0")
    obs, _ = env.reset(seed=0)
    assert env.action_space.shape == (2,) and obs.shape == (6,)


# ---------------------------------------------------------------------------------------------- planner
def planner(samples: int = 8, horizon: int = 5) -> MPPIPlanner:
    env = UnicycleID()
    return MPPIPlanner(MPPISettings(samples=samples, horizon=horizon), unicycle_step, unicycle_observe,
                       observation_difference, torch.as_tensor(env.action_space.low),
                       torch.as_tensor(env.action_space.high), torch.tensor([5.0, 5.0]), 0.05, 0.1)


def test_planner_step_shapes_and_bounds():
    plan = planner()
    theta = torch.tensor(THETA_PRIOR_MEAN, dtype=D)
    steps = fd_steps(theta)
    thetas = torch.cat([theta[None], perturbed_thetas(theta, steps)])
    states = plan.rollout(torch.zeros(5, dtype=D), torch.zeros(8, 5, 2, dtype=D), thetas)
    assert states.shape == (17, 8, 5, 5)
    seen = {}

    def score(f):
        seen["fim"] = f
        return boed_objective(f)

    action, row = plan.plan(torch.zeros(5, dtype=D), theta, torch.Generator().manual_seed(0), score, steps)
    assert action.shape == (2,) and seen["fim"].shape == (8, 8, 8)
    assert torch.allclose(seen["fim"], seen["fim"].transpose(1, 2))
    assert bool((action >= plan.low).all() and (action <= plan.high).all())
    assert plan.U.shape == (5, 2) and float(plan.U[-1].abs().sum()) == 0.0  # shifted, zero-filled
    assert row["plan/info_best"] > 0
    _, row = planner(samples=1).plan(torch.zeros(5, dtype=D), theta, torch.Generator().manual_seed(0))
    assert row["plan/info_best"] == 0.0  # cost only


def test_planner_rejects_bad_settings():
    env = UnicycleID()
    low, high = torch.as_tensor(env.action_space.low), torch.as_tensor(env.action_space.high)
    args = (unicycle_step, unicycle_observe, observation_difference, low, high, torch.zeros(2), 0.05)
    with pytest.raises(ConfigError, match="noise_var"):
        MPPIPlanner(MPPISettings(noise_var=[0.4]), *args, 0.1)
    with pytest.raises(ConfigError, match="plan_dt"):
        MPPIPlanner(MPPISettings(plan_dt=0.03), *args, 0.1)


# ---------------------------------------------------------------------------------------------- recipes
SMALL = ["steps=4", "planner.samples=16", "planner.horizon=4", "cem_samples=64", "max_history=2", "eval_every=2"]


@pytest.mark.parametrize("recipe", ["qoed", "qoed_boed", "qoed_agnostic"])
def test_recipe_smoke(tmp_path, recipe):
    from polo.control.recipe import load_control_recipe
    from polo.control.trainer import ControlTrainer

    rows = ControlTrainer(load_control_recipe(recipe, SMALL), tmp_path, log=lambda *a: None).run()
    assert len(rows) == 5 and rows[-1]["step"] == 4
    for key in ("eval/rmse", "eval/goal_distance", "eval/mask_max_wheel_gains", "train/goal_distance", "mask/size"):
        assert key in rows[-1] and math.isfinite(rows[-1][key])
    assert rows[-1]["eval/mask_max_wheel_gains"] <= 1 or recipe == "qoed_boed"
    assert (tmp_path / "checkpoints" / "step_000004").is_dir() and (tmp_path / "curves.png").is_file()


def test_resume_is_bit_for_bit(tmp_path, monkeypatch):
    from polo.control import trainer as trainer_module
    from polo.control.recipe import load_control_recipe

    monkeypatch.setattr(trainer_module, "plot_run", lambda *a, **k: None)  # curves are not under test here
    full = tmp_path / "full"
    trainer = trainer_module.ControlTrainer(load_control_recipe("qoed", [*SMALL, "checkpoint_every=2"]), full,
                                            log=lambda *a: None)
    trainer.run()
    killed = tmp_path / "killed"
    shutil.copytree(full, killed)
    shutil.rmtree(killed / "checkpoints" / "step_000004")  # the run died after iteration 2's checkpoint
    resumed = trainer_module.resume_control(killed, log=lambda *a: None)
    assert resumed.iteration == 2
    resumed.run()
    assert_same_rows(killed, full)
    assert torch.equal(resumed.method._mean, trainer.method._mean)
    assert torch.equal(resumed.method._cov, trainer.method._cov)
    assert torch.equal(resumed.method._planner.U, trainer.method._planner.U)


def test_recipe_configuration_errors():
    from polo.control.recipe import load_control_recipe

    assert load_control_recipe("qoed", ["steps=4", "steps_per_iteration=2"]).method.iterations == 2
    with pytest.raises(ConfigError, match="objective"):
        load_control_recipe("qoed", ["objective=trace"])
    with pytest.raises(ConfigError, match="not a multiple of steps_per_iteration"):
        load_control_recipe("qoed", ["steps=7", "steps_per_iteration=2"])
