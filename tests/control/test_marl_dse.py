"""MARL-DSE: bin mapping, rewards and space sizes (spec §8(e)), SyntheticDRAM against its brute-force optimum, the
per-agent vs joint ratio at the first minibatch, and the recipes (smoke, learning on seed 0)."""
import json

import numpy as np
import pytest
import torch

from polo.control.math.marl_dse import bin_index, dse_reward, joint_space_size, logit_count
from polo.control.envs.synthetic_dram import SIZES, DramModel, SyntheticDRAM, dram_optimum
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer

SMALL = ["iterations=2", "eval_every=1", "checkpoint_every=2", "env.num_envs=8"]


def test_bin_mapping_matches_digitize():
    a = torch.tensor([[-1.0], [-0.3], [0.2], [0.99]])
    assert bin_index(a, [4]).squeeze(-1).tolist() == [0, 1, 2, 3]
    assert bin_index(a, [3]).squeeze(-1).tolist() == [0, 1, 1, 2]
    edges = torch.tensor([[1.0, 1.0], [-1.5, 2.0]])  # a = 1 → last bin; outside [−1, 1] → nearest end
    assert bin_index(edges, [4, 3]).tolist() == [[3, 2], [0, 2]]
    grid = np.linspace(-1, 0.999, 501)
    for n in SIZES:
        expected = np.digitize(grid, np.arange(-1, 1, 2 / n)) - 1
        assert bin_index(torch.tensor(grid)[:, None], [n]).squeeze(-1).tolist() == expected.tolist()


def test_bin_mapping_rejects_bad_input():
    with pytest.raises(ValueError, match="2 components but there are 3 knobs"):
        bin_index(torch.zeros(2), [2, 2, 2])
    with pytest.raises(ValueError, match="NaN"):
        bin_index(torch.tensor([float("nan")]), [2])


def test_space_sizes():
    assert joint_space_size(SIZES) == 442368
    assert logit_count(SIZES) == 41


def test_latency_reward_and_cap():
    lat = torch.tensor([1.1, 1.0005, 1.0])
    r = dse_reward("latency", lat, torch.zeros(3), target_latency=1.0, target_power=1.0)
    assert r.tolist() == pytest.approx([10.0, 1000.0, 1000.0], abs=1e-4)
    both = dse_reward("both", torch.tensor([1.1]), torch.tensor([2.5]), 1.0, 2.0)  # 10 · 4
    assert both.item() == pytest.approx(40.0, abs=1e-4)
    assert dse_reward("power", torch.tensor([1.1]), torch.tensor([2.5]), 1.0, 2.0).item() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="latency, power or both"):
        dse_reward("area", lat, lat, 1.0, 1.0)


def test_brute_force_optimum_is_exact():
    model = DramModel(42)
    best = dram_optimum(42)
    lat = model.all_latencies()
    assert lat.shape == tuple(SIZES) and lat.size == 442368
    assert model.latency(np.array(best["latency_design"])) == pytest.approx(best["latency"], abs=1e-12)
    rng = np.random.default_rng(0)
    designs = np.stack([rng.integers(0, n, 2000) for n in SIZES], -1)
    np.testing.assert_allclose(model.latency(designs), lat[tuple(designs.T)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.power(designs), model.all_powers()[tuple(designs.T)], rtol=0, atol=1e-12)
    assert best["latency"] <= model.latency(designs).min()
    separable = [int(np.argmin(model.w[i] * model.tab[i])) for i in range(len(SIZES))]
    assert model.latency(np.array(separable)) > best["latency"]  # the interaction makes knobs 3 and 9 non-separable


def test_env_step_reward_and_info():
    env = SyntheticDRAM()
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [0.0, 0.0, 0.0]
    best = np.array(dram_optimum(42)["latency_design"])
    obs, reward, terminated, truncated, info = env.step(best)
    assert terminated and not truncated
    assert reward == pytest.approx(9.0, abs=1e-9)  # L* = 0.9 · min latency
    assert info["latency_ratio"] == pytest.approx(1.0, abs=1e-12)
    assert obs[2] == pytest.approx(info["latency"])
    assert obs[0] == pytest.approx(info["power"] * info["latency"], rel=1e-6)
    assert env.reset()[0].tolist() == obs.tolist()  # the observation is the last design's metrics
    with pytest.raises(ValueError, match="out of range"):
        env.step(np.array(SIZES))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, int))


def test_continuous_actions_use_the_bins():
    env = SyntheticDRAM(action_type="continuous")
    env.reset(seed=0)
    a = np.linspace(-1, 1, len(SIZES))
    assert env.design(a).tolist() == bin_index(torch.tensor(a), SIZES).tolist()
    assert env.action_space.shape == (len(SIZES),)


def _first_minibatch_grad(recipe: str):
    method = load_control_recipe(recipe, ["seed=3", *SMALL]).method
    torch.manual_seed(3)
    method.setup(3, print)
    batch = method.collect()
    result = method._advantage(batch)
    batch.advantages, batch.returns = result.advantages, result.returns
    steps = method.step_tensors(batch)
    method._optimizer.step = lambda: None  # keep the gradient, skip the step
    params = [p for g in method._optimizer.param_groups for p in g["params"]]
    stats = method.minibatch_step(steps, params)
    return steps, stats, method._policy.table.grad.clone()


def test_per_agent_and_joint_ratio_give_the_same_first_gradient():
    marl_steps, _, marl_grad = _first_minibatch_grad("marl_dse")
    single_steps, _, single_grad = _first_minibatch_grad("marl_dse_single")
    assert torch.equal(marl_steps["act.action"], single_steps["act.action"])
    assert marl_steps["old_logp"].shape == (8, 10) and single_steps["old_logp"].shape == (8,)
    assert marl_grad.abs().sum() > 0
    torch.testing.assert_close(marl_grad, single_grad, atol=1e-6, rtol=1e-5)


def test_recipes_smoke(tmp_path):
    for name in ("marl_dse", "marl_dse_single"):
        run = tmp_path / name
        ControlTrainer(load_control_recipe(name, SMALL), run, log=lambda m: None).run()
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [0, 1, 2]
        assert {"eval/latency_ratio", "eval/return", "policy/clip_frac", "loss/policy"} <= set(rows[-1])
        assert rows[-1]["loss/value"] == 0.0  # no critic
        assert rows[-1]["eval/latency_ratio"] >= 1.0
        assert (run / "checkpoints").is_dir()


def test_marl_dse_reaches_the_optimum_seed0(tmp_path):
    """Seed 0: the greedy design's latency is within 1 % of the brute-force optimum after 60 iterations (1,920
    evaluated designs; the full recipe runs 150)."""
    recipe = load_control_recipe("marl_dse", ["seed=0", "iterations=60", "eval_every=60", "checkpoint_every=60"])
    rows = ControlTrainer(recipe, tmp_path / "run", log=lambda m: None).run()
    assert rows[0]["eval/latency_ratio"] > 1.1
    assert rows[-1]["eval/latency_ratio"] <= 1.01


# ---- mutation-testing kills

def test_bin_index_nan_message_edges_and_float64_boundaries():
    with pytest.raises(ValueError, match=r"^bin_index: the action has NaN or infinite components$"):
        bin_index(torch.tensor([float("nan")]), [2])
    # n = 2, edges [−1, 0): a = 0 lies on the edge and belongs to the upper bin (digitize, right-closed edges)
    assert bin_index(torch.tensor([0.0]), [2]).tolist() == [1]
    # n = 3: the float64 edge −1 + 2/3 = −0.33333333333333337; a = −0.33333334 lies below it → bin 0 (a float32
    # edge, −0.3333333432674408, would put it in bin 1)
    assert bin_index(torch.tensor([-0.33333334], dtype=torch.float64), [3]).tolist() == [0]
    # n = 49: float64 arange(−1, 1, 2/49) has 50 entries (the last 0.9999999999999999), so a = 1 would land one
    # past the last bin without the upper clamp: it is bin 48
    assert bin_index(torch.tensor([1.0]), [49]).tolist() == [48]
