"""QOED: the Fisher-information objectives and the identifiable-set selection (every number of the spec's unit-test
block), the UnicycleID model, the MPPI planner, and the ``qoed`` recipes (smoke run, resume bit for bit)."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from polo.control.math.qoed import (active_parameters, agnostic_objective, boed_objective, cem_minimize,
                                    central_jacobian, fd_steps, fisher_information, gaussian_posterior_cov,
                                    identifiable_mask, information, mppi_update, mppi_weights, perturbed_thetas,
                                    schur_objective, step_bonus, symmetrize)
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


# ---- mutation-testing kills

def test_central_jacobian_error_counts_the_leading_dim_and_follows_y_dtype():
    steps = fd_steps(torch.tensor([0.3, -1.0, 2.0], dtype=D))  # float64 steps
    with pytest.raises(ValueError, match=r"2p = 6 perturbed outputs, got 5$"):
        central_jacobian(torch.zeros(5, 4, 2, dtype=D), steps)  # 5 outputs, batch 4
    jac = central_jacobian(torch.zeros(6, 2, dtype=torch.float32), steps)
    assert jac.dtype == torch.float32  # the steps follow y's dtype


def test_symmetrize_a_non_symmetric_matrix():
    a = torch.tensor([[1.0, 2.0], [4.0, 3.0]], dtype=D)
    assert torch.equal(symmetrize(a), torch.tensor([[1.0, 3.0], [3.0, 3.0]], dtype=D))  # off-diagonal (2+4)/2


def test_active_parameters_threshold_is_inclusive():
    var = torch.tensor([0.0025, 0.0024, 1.0], dtype=D)
    assert active_parameters(var, 0.0025).tolist() == [True, False, True]


def test_identifiable_mask_floor_default_ratio_edges_and_dtype():
    # λ_1 = 0.5 is above the default eig_floor 0.1: both parameters identifiable; a bool mask comes back
    mask = identifiable_mask(torch.diag(torch.tensor([0.5, 0.2], dtype=D)))
    assert mask.dtype == torch.bool and mask.tolist() == [True, True]
    # λ_1 = 0.1 exactly at the floor: nothing identifiable (λ_1 ≤ eig_floor)
    assert identifiable_mask(torch.diag(torch.tensor([0.1, 0.05], dtype=D))).tolist() == [False, False]
    # λ_2 = 1 = eig_ratio·λ_1 = 0.01·100 exactly: still observable, so n_obs = 2
    assert identifiable_mask(torch.diag(torch.tensor([100.0, 1.0], dtype=D))).tolist() == [True, True]
    # a single identifiable parameter and an empty FIM
    assert identifiable_mask(torch.tensor([[5.0]], dtype=D)).tolist() == [True]
    assert identifiable_mask(torch.zeros(0, 0, dtype=D)).tolist() == []


def test_identifiable_mask_rejects_cubes_and_non_square_with_exact_texts():
    with pytest.raises(ValueError, match=r"one square FIM \[p, p\], got shape \(3, 3, 3\)"):
        identifiable_mask(torch.eye(3, dtype=D).expand(3, 3, 3))
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)"):
        identifiable_mask(torch.ones(2, 3, dtype=D))
    with pytest.raises(ValueError, match=r"^identifiable_mask: the FIM has non-finite entries$"):
        identifiable_mask(torch.tensor([[1.0, float("inf")], [0.0, 1.0]], dtype=D))


def _three_parameter_fim() -> torch.Tensor:
    """F = 10·c₁c₁ᵀ + 5·c₂c₂ᵀ with orthonormal c₁ = (√½, √½, 0), c₂ = (0.2, −0.2, √0.92): both directions are
    observed (n_obs = 2); the rows of V_obs are r₀ = (√½, 0.2), r₁ = (√½, −0.2), r₂ = (0, √0.92), so the scores are
    s = (0.54, 0.54, 0.92) and |w₀·w₂| = 0.2·√0.92/(√0.54·√0.92) = 0.2722, 1 − 0.2722 = 0.728."""
    c1 = torch.tensor([0.5 ** 0.5, 0.5 ** 0.5, 0.0], dtype=D)
    c2 = torch.tensor([0.2, -0.2, 0.92 ** 0.5], dtype=D)
    return 10 * torch.outer(c1, c1) + 5 * torch.outer(c2, c2)


def test_identifiable_mask_distance_uses_unit_directions():
    f = _three_parameter_fim()
    assert identifiable_mask(f).tolist() == [True, False, True]  # 0.728 ≥ 0.05: parameter 0 joins after 2
    # dist_threshold 0.78 > 0.728: picking parameter 2 removes 0 and 1 (unnormalised rows would give 1 − 0.192 = 0.81)
    assert identifiable_mask(f, dist_threshold=0.78).tolist() == [False, False, True]


def test_identifiable_mask_contribution_ratio_keeps_low_scores_out():
    f = _three_parameter_fim()
    # contrib_ratio 0.7: the cut 0.7·0.92 = 0.644 leaves parameters 0 and 1 (0.54) out of the pool for good
    assert identifiable_mask(f, contrib_ratio=0.7).tolist() == [False, False, True]
    f2 = fim(twin(J))  # scores (0.5, 0.5, 1.0, 0.0)
    # contrib_ratio 1: only the top score (s ≥ 1·max s, inclusive) is a candidate
    assert identifiable_mask(f2, contrib_ratio=1.0).tolist() == [False, False, True, False]
    # two exact twins: scores (0.5, 0.5), max 0.5; the cut is 0.5·0.5 = 0.25, so one twin is selected
    assert identifiable_mask(torch.full((2, 2), 10.0, dtype=D), contrib_ratio=0.5).tolist() == [True, False]


def test_identifiable_mask_stops_at_n_obs_and_keeps_orthogonal_at_threshold_one():
    # dist_threshold 0 removes nobody, yet |S| stops at n_obs = 2 (three candidates with s > 0)
    assert int(identifiable_mask(fim(twin(J)), dist_threshold=0.0).sum()) == 2
    # orthogonal directions: 1 − |w₀·w₁| = 1 exactly, which passes dist_threshold 1 (≥)
    assert identifiable_mask(torch.diag(torch.tensor([3.0, 2.0], dtype=D)), dist_threshold=1.0).tolist() == [True, True]


def test_objectives_keep_the_fim_dtype_and_batch_shape():
    f32 = fim(J).float()
    mask = torch.tensor([1.0, 1.0, 0.0], dtype=D)  # a float64 0/1 mask
    assert agnostic_objective(f32, mask).dtype == torch.float32
    batch = torch.stack([fim(J), 2 * fim(J), fim(J)])
    empty = torch.zeros(3, dtype=torch.bool)
    assert schur_objective(batch, empty).shape == (3,)
    assert information(batch, empty, "none").shape == (3,)


def test_schur_ridge_is_exact_in_float64_and_information_passes_ridge():
    f = fim(J)
    mask = torch.tensor([True, True, False])
    for ridge in (1e-3, 0.1):
        # one nuisance: tr F_SS − (F_02² + F_12²)/(F_22 + ridge)
        expect = f[0, 0] + f[1, 1] - (f[0, 2] ** 2 + f[1, 2] ** 2) / (f[2, 2] + ridge)
        assert float(schur_objective(f, mask, ridge)) == pytest.approx(float(expect), rel=1e-13)
    # ridge 0.5: 1116 − 2·0.04/0.5004 = 1115.8401, not the default ridge's 1058.8571
    assert float(information(f, mask, "qoed", ridge=0.5)) == pytest.approx(1116 - 0.08 / 0.5004, abs=1e-4)


def test_information_error_lists_the_objectives():
    with pytest.raises(ConfigError, match=r"objective must be one of boed, qoed, agnostic, none, got 'trace'"):
        information(fim(J), torch.ones(3, dtype=torch.bool), "trace")


def test_step_bonus_batched_values_and_inclusive_gate():
    batch = torch.tensor([[0.5, 0.2, 0.05], [0.05, 0.01, 0.0]], dtype=D)
    out = step_bonus(batch, torch.zeros(2, dtype=D), "qoed")
    # row 0: 0.5·0.001/(0.001 + 0.25) = 0.001992; row 1: Σg = 0.06 ≤ 0.1, gated to 0
    assert out.tolist() == pytest.approx([0.5 * 0.001 / 0.251, 0.0], abs=1e-9)
    g = torch.tensor([0.5, 0.25], dtype=D)  # Σg = 0.75 exactly
    assert float(step_bonus(g, torch.tensor(0.0, dtype=D), "agnostic", threshold=0.75)) == 0.0  # not > 0.75
    assert float(step_bonus(g, torch.tensor(0.0, dtype=D), "agnostic", threshold=0.7)) == 0.5


def test_mppi_error_text_large_costs_and_lower_clamp():
    with pytest.raises(ValueError, match=r"^mppi_weights: every candidate's cost is non-finite$"):
        mppi_weights(torch.tensor([float("inf"), float("nan")]), 1.0)
    # float32 costs 1e7 and 1e7 + 1 differ by 1 after subtracting the minimum: weights softmax(0, −1)
    w = mppi_weights(torch.tensor([1e7, 1e7 + 1], dtype=torch.float32), 1.0)
    assert w.tolist() == pytest.approx([1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))], abs=1e-6)
    controls = torch.tensor([[[-2.0]], [[0.5]]], dtype=D)
    low, high = torch.tensor([-1.0], dtype=D), torch.tensor([1.0], dtype=D)
    assert float(mppi_update(controls, torch.tensor([0.0, 100.0], dtype=D), 1e-3, low, high)) == -1.0  # clamped up


def test_cem_elites_bounds():
    cost = lambda t: t.sum(1)  # noqa: E731
    gen = torch.Generator().manual_seed(0)
    zero, one = torch.zeros(2, dtype=D), torch.ones(2, dtype=D)
    for elites in (1, 4):  # both ends of [1, samples] are allowed
        out = cem_minimize(cost, zero, one, gen, samples=4, elites=elites, iterations=1, low=-1.0, high=1.0)
        assert out.shape == (2,)
    with pytest.raises(ConfigError, match=r"cem elites must be in \[1, samples=4\], got 0"):
        cem_minimize(cost, zero, one, gen, samples=4, elites=0, iterations=1, low=-1.0, high=1.0)


def test_cem_with_all_elites_matches_the_refit_by_hand():
    """elites = samples: each iteration's mean and population std (+1e-9) of all clamped draws."""
    mean, std = torch.tensor([0.2, -0.3], dtype=D), torch.tensor([2.0, 0.5], dtype=D)
    with torch.random.fork_rng():
        torch.manual_seed(123)  # the global generator must not be used
        out = cem_minimize(lambda t: t.sum(1), mean, std, torch.Generator().manual_seed(0), samples=6, elites=6,
                           iterations=2, low=-1.0, high=1.0)  # no frozen argument: nothing frozen
    gen = torch.Generator().manual_seed(0)
    mu, s = mean, std
    for it in range(2):
        theta = torch.clamp(mu + torch.randn(6, 2, generator=gen, dtype=D) * s, -1.0, 1.0)
        assert it or bool((theta == 1.0).any() and (theta == -1.0).any())  # both bounds bite at first
        mu, s = theta.mean(0), theta.std(0, unbiased=False) + 1e-9
    assert out.dtype == D and torch.allclose(out, mu, rtol=0, atol=1e-13)


def test_cem_ranks_nan_costs_last():
    def cost(t):
        return torch.where(t[:, 0] > 0, torch.full_like(t[:, 0], float("nan")), 1.0 + t.square().sum(1))

    out = cem_minimize(cost, torch.zeros(2, dtype=D), torch.ones(2, dtype=D), torch.Generator().manual_seed(0),
                       samples=16, elites=1, iterations=1, low=-5.0, high=5.0)
    assert float(out[0]) <= 0.0  # the NaN rows (θ₀ > 0) are never the elite


def test_posterior_covariance_clamps_fisher_keeps_cross_terms_and_jitter():
    cov = torch.diag(torch.tensor([4.0, 0.25], dtype=D))
    post = gaussian_posterior_cov(cov, torch.tensor([0.5, -3.0], dtype=D), torch.tensor([True, True]))
    # 1/(1/4 + 0.5) = 4/3; a negative Fisher entry counts as 0: 1/(4 + 0) = 0.25
    assert torch.diagonal(post).tolist() == pytest.approx([4 / 3, 0.25], abs=1e-8)
    coupled = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=D)
    post = gaussian_posterior_cov(coupled, torch.tensor([1.0, 0.0], dtype=D), torch.tensor([True, False]))
    assert torch.equal(post[0, 1], coupled[0, 1]) and torch.equal(post[1, 0], coupled[1, 0])  # inactive row/col kept
    # a flat prior (variance 1e9) and no information: (1e-9 + 1e-9 jitter)⁻¹ = 5e8
    flat = gaussian_posterior_cov(torch.tensor([[1e9]], dtype=D), torch.zeros(1, dtype=D), torch.tensor([True]))
    assert float(flat) == pytest.approx(5e8, rel=1e-12)


def test_identifiable_mask_breaks_exact_score_ties_by_index():
    """12 exact twin pairs, block k = (1 + k)·[[1, 1], [1, 1]] (p = 24 > 16, where an unstable sort reorders ties):
    every parameter scores exactly ½ and each pair keeps its first twin."""
    f = torch.block_diag(*[(1.0 + k) * torch.ones(2, 2, dtype=D) for k in range(12)])
    assert identifiable_mask(f).tolist() == [True, False] * 12
