"""STL-Nav2D (dynamics, augmented state, stage-wise reward, success) and method tgpo (allocations, the chain inside
the windows, configuration errors, a recipe run and a killed run resumed bit for bit)."""
import json
import math

import numpy as np
import pytest
import torch

from polo.control.math.stl import check_allocation
from polo.core.registry import ConfigError
from polo.control.envs.stl_nav2d import STLNav2D
from polo.train.checkpoint import checkpoint_steps, latest_checkpoint, load_checkpoint
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer
from tests.control.kill_and_resume import assert_same_rows, killed_after, metrics_rows

A, B = np.array([1.5, 1.0]), np.array([-1.5, 1.0])
SMALL = ["env.num_envs=4", "iterations=3", "warmup_iterations=1", "mh_steps=3", "eval_episodes=3",
         "eval_candidates=4", "eval_every=1", "checkpoint_every=1"]


def scripted_episode(env):
    """A → under the obstacle → B, at full speed; returns the last step's (reward, info)."""
    waypoints, i, x = [np.array([1.4, 0.9]), np.array([0.0, 0.25]), np.array([-1.4, 0.9])], 0, np.zeros(2)
    for _ in range(env.horizon):
        if i < 2 and np.linalg.norm(x - waypoints[i]) < 0.15:
            i += 1
        d = waypoints[i] - x
        obs, reward, terminated, truncated, info = env.step(d / max(np.abs(d).max(), 0.1))
        x = obs[:2].astype(np.float64)
    assert terminated and not truncated
    return reward, info


def test_dynamics_observation_and_progress_reward():
    env = STLNav2D()
    obs, _ = env.reset(seed=0, options={"tau": [10, 40]})
    np.testing.assert_allclose(obs, [0, 0, 0, 0.2, 0.8, 0, 0, 1.5, 1.0, 0.2], atol=1e-6)
    obs, reward, terminated, _, info = env.step(np.array([3.0, 0.5]))  # clipped to (1, 0.5)
    np.testing.assert_allclose(obs[:3], [0.1, 0.05, 1 / 50], atol=1e-6)
    np.testing.assert_allclose(obs[7:], [1.4, 0.95, (10 - 1) / 50], atol=1e-6)
    expected = 2.0 * (math.hypot(1.5, 1.0) - math.hypot(1.4, 0.95))
    assert reward == pytest.approx(expected, abs=1e-6) and not terminated and info == {}


def test_active_subgoal_follows_the_allocation_order():
    env = STLNav2D()
    obs, _ = env.reset(options={"tau": [40, 10]})  # B first
    np.testing.assert_allclose(obs[7:], [-1.5, 1.0, 0.2], atol=1e-6)
    init = env.initial_observations(np.array([[40, 10], [10, 40], [5, 5]]))
    assert init.shape == (3, env.obs_dim)
    np.testing.assert_allclose(init[:, 7:9], [[-1.5, 1.0], [1.5, 1.0], [1.5, 1.0]])  # ties: by index
    np.testing.assert_allclose(init[0], obs)


def test_invariant_penalty_and_subgoal_bonus():
    env = STLNav2D()
    env.reset(options={"tau": [10, 40]})
    env.path[0] = [0.0, 0.5]  # next to the obstacle O = ball((0, 0.9), 0.5)
    _, reward, *_ = env.step(np.array([0.0, 1.0]))  # into it
    progress = math.hypot(1.5, 0.5) - math.hypot(1.5, 0.4)
    assert reward == pytest.approx(2.0 * progress - 1.0, abs=1e-6)
    env.reset(options={"tau": [10, 40]})
    env.path[0] = A - [0.35, 0.0]  # one step from A, on time
    obs, reward, *_ = env.step(np.array([1.0, 0.0]))
    assert reward == pytest.approx(2.0 * 0.1 + 1.0, abs=1e-6)
    np.testing.assert_allclose(obs[5:10], [1, 0, *(B - (A - [0.25, 0.0])), (40 - 1) / 50], atol=1e-6)
    env.reset(options={"tau": [0, 40]})  # the same reach after the deadline τ_A = 0: flag, no bonus
    env.path[0] = A - [0.35, 0.0]
    obs, reward, *_ = env.step(np.array([1.0, 0.0]))
    assert reward == pytest.approx(2.0 * 0.1, abs=1e-6) and obs[5] == 1


def test_success_and_failure_at_the_horizon():
    env = STLNav2D()
    env.reset(options={"tau": [20, 45]})
    reward, info = scripted_episode(env)
    assert info["success"] == 1.0 and info["robustness"] > 0 and reward == pytest.approx(5.0)  # all reached: bonus only
    assert env.flags.tolist() == [1.0, 1.0]
    env.reset(options={"tau": [20, 45]})
    for _ in range(50):
        _, reward, terminated, _, info = env.step(np.zeros(2))
    assert terminated and info["success"] == 0.0 and info["robustness"] < 0 and reward == 0.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(2))


def test_allocation_sources_and_errors():
    env = STLNav2D(task="ordered")
    assert env.low.tolist() == [0, 25] and env.high.tolist() == [20, 50]
    env.next_tau = np.array([3, 30])
    env.reset()
    assert env.tau.tolist() == [3, 30]
    env.reset(options={"tau": [4, 31]})
    assert env.tau.tolist() == [4, 31]
    env.next_tau = None
    for seed in range(20):
        env.reset(seed=seed)
        assert 0 <= env.tau[0] <= 20 and 25 <= env.tau[1] <= 50
    with pytest.raises(ValueError, match="integers in"):
        env.reset(options={"tau": [21, 30]})
    with pytest.raises(ValueError, match="integers in"):
        env.reset(options={"tau": [1.5, 30]})
    with pytest.raises(ValueError, match="task"):
        STLNav2D(task="sideways")


def test_state_dict_round_trip():
    env = STLNav2D()
    env.reset(seed=3)
    for _ in range(7):
        env.step(np.array([0.7, 0.4]))
    env.next_tau = None
    state = env.state_dict()
    copy = STLNav2D()
    copy.load_state_dict(state)
    for e in (env, copy):  # the same episode continues, then the same uniform draw
        e.step(np.array([0.2, 0.9]))
        e.reset()
    np.testing.assert_array_equal(copy.tau, env.tau)
    assert copy.order == env.order and copy.t == env.t == 0


def test_registered_id():
    from polo.control.envs.vector import EnvSettings, make_vector_env

    envs = make_vector_env(EnvSettings(id="polo/STLNav2D-v0", num_envs=2, kwargs={"task": "ordered"}), 0.99)
    envs.set_attr("next_tau", [np.array([1, 30]), np.array([2, 40])])
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 10) and [e.unwrapped.tau.tolist() for e in envs.envs] == [[1, 30], [2, 40]]


def test_allocations_stay_in_the_windows():
    method = load_control_recipe("tgpo_nav2d_ordered", SMALL).method
    method.setup(0, print)
    bounds = (method._low, method._high)
    method._iteration = 1  # warm-up: uniform
    warm = method.draw_allocations(64)
    check_allocation(warm, bounds, "warm-up")
    assert method._allocation_stats["tgpo/uniform_fraction"] == 1.0
    method._iteration = 2  # the chain
    chained = method.draw_allocations(64)
    check_allocation(chained, bounds, "chain")
    assert 0 <= method._allocation_stats["tgpo/mh_acceptance"] <= 1


def test_configuration_errors():
    with pytest.raises(ConfigError, match="normalize_obs"):
        load_control_recipe("tgpo_nav2d", [*SMALL, "env.normalize_obs=true"]).method.setup(0, print)
    with pytest.raises(ConfigError, match="num_steps"):
        load_control_recipe("tgpo_nav2d", [*SMALL, "engine.num_steps=40"]).method.setup(0, print)
    with pytest.raises(ConfigError, match="grounded in time"):
        load_control_recipe("tgpo_nav2d", [*SMALL, "env.id=Pendulum-v1"]).method.setup(0, print)
    with pytest.raises(ConfigError, match="explore"):
        load_control_recipe("tgpo_nav2d", ["explore=1.5"])


def test_recipes_load():
    for name, allocation, task in [("tgpo_nav2d", "mh", None), ("tgpo_nav2d_uniform", "uniform", None),
                                   ("tgpo_nav2d_ordered", "mh", "ordered"),
                                   ("tgpo_nav2d_ordered_uniform", "uniform", "ordered")]:
        m = load_control_recipe(name).method
        assert (m.allocation, m.env.kwargs.get("task"), m.iterations, m.env.num_envs) == (allocation, task, 150, 32)


def test_recipe_smoke_and_killed_run_resumes_bit_for_bit(tmp_path):
    trainer, whole, killed = killed_after("tgpo_nav2d", SMALL, tmp_path, 2)
    out = metrics_rows(whole)
    assert [r["step"] for r in out] == [0, 1, 2, 3]
    assert {"eval/success", "eval/robustness", "eval/allocation_value", "tgpo/allocation_value",
            "tgpo/mh_acceptance", "loss/value"} <= set(out[-1])
    assert "tgpo/mh_acceptance" not in out[1] and 0 <= out[-1]["eval/success"] <= 1
    assert len(checkpoint_steps(whole)) >= 1 and (whole / "curves.png").is_file()
    trainer.run()
    assert_same_rows(killed, whole)
    weights, _ = load_checkpoint(latest_checkpoint(whole))
    for part in ("policy", "critic"):
        for key, value in trainer.method.weights()[part].items():
            assert torch.equal(value, weights[part][key]), (part, key)


def test_tgpo_learns_the_task_seed0(tmp_path):
    """Seed 0, the shipped recipe cut to 50 iterations (20 uniform, 30 Metropolis–Hastings, the learning rate
    annealed over the 50): the 50 test episodes satisfy the formula at a rate ≥ 0.9 (measured 1.00 at iterations
    40 and 50, 0.08 at 30; seed 1: 1.00 from iteration 30; docs/control.md)."""
    recipe = load_control_recipe("tgpo_nav2d", ["iterations=50", "eval_every=50", "checkpoint_every=50"])
    last = ControlTrainer(recipe, tmp_path / "run", log=lambda m: None).run()[-1]
    assert last["eval/success"] >= 0.9, json.dumps(last)
