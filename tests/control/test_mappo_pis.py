"""MAPPO-PIS: the 1-D intent / safety-module / reward math (the spec's numbers), the Merge1D environment, the shared
actor, the method ``mappo`` (both critics) and its recipes."""

import math

import numpy as np
import pytest
import torch

from polo.core.advantages.gae import gae
from polo.control.math.mappo_pis import (FASTER, IDLE, MERGE, SLOWER, agent_rewards, headway_cost, intent_paths,
                                         merge_cost, merge_priority, safety_rooms, shield_action, speed_reward)
from polo.core.registry import ConfigError
from polo.control.engines.gym import action_rows
from polo.train.checkpoint import checkpoint_steps
from polo.control.recipe import load_control_recipe
from polo.control.trainer import ControlTrainer
from tests.control.kill_and_resume import assert_same_rows, killed_after, metrics_rows

ATOL = 1e-4
INF = float("inf")


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- core math
def test_intent_rollout_and_gaps():
    ego, _ = intent_paths(t(0.0), t(20.0), t(2.0), 0.2, 5)
    leader, _ = intent_paths(t(8.0), t(15.0), t(0.0), 0.2, 5)
    assert torch.allclose(ego, t([4.0, 8.08, 12.24, 16.48, 20.8]), atol=ATOL)
    assert torch.allclose(leader, t([11.0, 14.0, 17.0, 20.0, 23.0]), atol=ATOL)
    gaps = leader - ego
    assert torch.allclose(gaps, t([7.0, 5.92, 4.76, 3.52, 2.2]), atol=ATOL)
    assert abs(float(gaps.min()) - 2.2) < ATOL


def test_intent_closed_form_equals_the_step_by_step_recursion():
    g = torch.Generator().manual_seed(0)
    x, v = torch.rand(64, generator=g, dtype=torch.float64) * 100, 10 + torch.rand(64, generator=g, dtype=torch.float64) * 20
    a = (torch.rand(64, generator=g, dtype=torch.float64) - 0.5) * 16
    xs, vs = intent_paths(x, v, a, 0.2, 7, v_min=10.0, v_max=30.0)
    for k in range(7):
        x, v = x + v * 0.2, (v + a * 0.2).clamp(10.0, 30.0)
        assert torch.allclose(xs[:, k], x) and torch.allclose(vs[:, k], v)


def _spec_rooms():
    """Ego at x=0, v=20 with SLOWER/IDLE/FASTER (a = −2, 0, +2); leader at x=8, v=15 keeping its speed."""
    ego, _ = intent_paths(t(0.0), t(20.0), t([-2.0, 0.0, 2.0]), 0.2, 5)
    leader, _ = intent_paths(t([8.0]), t([15.0]), t([0.0]), 0.2, 5)
    no = torch.zeros(3, dtype=torch.bool)
    return safety_rooms(ego, 0.0, no, torch.zeros(3, dtype=torch.long), t([INF] * 3), leader, t([8.0]),
                        torch.zeros(1, dtype=torch.long))


def test_safety_rooms_and_the_replacement():
    rooms = _spec_rooms()
    assert torch.allclose(rooms, t([3.8, 3.0, 2.2]), atol=ATOL)
    everything = torch.ones(3, dtype=torch.bool)
    assert shield_action(FASTER, rooms, everything, 5.0) == SLOWER  # FASTER predicted to collide
    assert shield_action(FASTER, rooms, everything, 2.0) == FASTER  # room 2.2 ≥ 2: the plan stays
    assert shield_action(1, rooms, torch.tensor([False, True, True]), 5.0) == 1  # best available


def test_rooms_of_a_lane_change_and_the_ramp_end():
    """A merge counts the gap either side (|Δx|) to the target lane's vehicles, and staying on the ramp counts
    the distance to the ramp's end; vehicles behind or in the other lane do not count otherwise."""
    ego, _ = intent_paths(t(50.0), t(20.0), t([0.0, 0.0]), 0.2, 5)           # [stay on ramp, merge]
    others, _ = intent_paths(t([46.0, 40.0]), t([20.0, 20.0]), t([0.0, 0.0]), 0.2, 5)
    rooms = safety_rooms(ego, 50.0, torch.tensor([False, True]), torch.tensor([1, 0]), t([105.0, INF]), others,
                         t([46.0, 40.0]), torch.tensor([0, 1]))
    assert torch.allclose(rooms, t([105.0 - 70.0, 4.0]), atol=ATOL)  # ramp: only its end; merge: 4 m behind


def test_rooms_batch_over_egos_and_without_others():
    one = _spec_rooms()
    ego, _ = intent_paths(t(0.0), t(20.0), t([-2.0, 0.0, 2.0]), 0.2, 5)
    leader, _ = intent_paths(t([8.0]), t([15.0]), t([0.0]), 0.2, 5)
    no = torch.zeros(2, 3, dtype=torch.bool)
    batched = safety_rooms(ego.expand(2, 3, 5), t([0.0, 0.0]), no, torch.zeros(2, 3, dtype=torch.long),
                           t([[INF] * 3] * 2), leader.expand(2, 1, 5), t([[8.0], [8.0]]),
                           torch.zeros(2, 1, dtype=torch.long))
    assert torch.allclose(batched, one.expand(2, 3))
    alone = safety_rooms(ego, 0.0, no[0], torch.zeros(3, dtype=torch.long), t([30.0] * 3), leader[:0], t([]),
                         torch.zeros(0, dtype=torch.long))
    assert torch.allclose(alone, 30.0 - ego[:, -1])


def test_reward_terms():
    r = agent_rewards(torch.tensor([False]), t([25.0]), t([20.0]), torch.tensor([False]), t([300.0]), 310.0, 80.0)
    assert abs(float(headway_cost(t(20.0), t(25.0))) - (-0.4055)) < ATOL
    assert abs(float(r) - (-0.8719)) < ATOL
    assert abs(float(merge_cost(t(300.0), 150.0 + 80.0 + 80.0, 80.0)) - (-0.8825)) < ATOL
    crashed = agent_rewards(torch.tensor([True]), t([25.0]), t([20.0]), torch.tensor([False]), t([300.0]), 310.0, 80.0)
    assert abs(float(crashed - r) + 200.0) < ATOL
    on_ramp = agent_rewards(torch.tensor([False]), t([25.0]), t([20.0]), torch.tensor([True]), t([300.0]), 310.0, 80.0)
    assert abs(float(on_ramp - r) - 4 * (-0.8825)) < ATOL


def test_reward_edge_cases():
    assert float(headway_cost(t(5.0), t(0.0))) == 0.0          # standing: no headway to keep
    assert float(headway_cost(t(50.0), t(20.0))) == 0.0        # more than T_h seconds ahead: no cost
    assert torch.equal(speed_reward(t([5.0, 20.0, 40.0])), t([0.0, 0.5, 1.0]))


def test_priority():
    p = merge_priority(torch.tensor([True, False]), t([30.0, 0.0]), t([15.0, 40.0]), t([20.0, 25.0]), 80.0)
    assert torch.allclose(p, t([-1.3600, 0.1438]), atol=ATOL)
    standing = merge_priority(torch.tensor([False]), t([0.0]), t([15.0]), t([0.0]), 80.0)
    assert float(standing) == 0.0
    tied = merge_priority(torch.tensor([False]), t([0.0]), t([15.0]), t([0.0]), 80.0, tie_break=t([5e-4]))
    assert abs(float(tied) - 5e-4) < 1e-12


def test_scaled_monte_carlo_returns_are_gae_with_lambda_one():
    """G_t = r_t/20 + γ·G_{t+1}, terminal bootstrap 0: the registered gae with λ = 1 and a zero baseline; with
    Q(o, a) as the baseline it gives the released code's advantage G − Q."""
    r = t([[10.0, 12.0, -200.0]]) / 20
    ones, done = torch.ones_like(r), t([[0.0, 0.0, 1.0]])
    g = gae(r, torch.zeros_like(r), ones, 0.99, 1.0, dones=done, bootstrap=t([123.0]))
    assert torch.allclose(g, t([[-8.7070, -9.3000, -10.0000]]), atol=ATOL)
    q = t([[1.0, -2.0, 0.5]])
    assert torch.allclose(gae(r, q, ones, 0.99, 1.0, dones=done), g - q, atol=1e-9)
    open_end = gae(r, torch.zeros_like(r), ones, 0.99, 1.0, bootstrap=t([2.0]))
    assert abs(float(open_end[0, -1]) - (-10.0 + 0.99 * 2.0)) < 1e-9


def test_per_agent_advantages_in_action_rows():
    logp = torch.zeros(4, 3)
    assert torch.equal(action_rows(logp, torch.arange(4.0)).advantages, torch.arange(4.0)[:, None].expand(4, 3))
    per_agent = torch.arange(12.0).reshape(4, 3)
    assert torch.equal(action_rows(logp, per_agent).advantages, per_agent)


# ---------------------------------------------------------------------------------------------- environment
def make(**kwargs):
    from polo.control.envs.merge1d import Merge1D
    return Merge1D(**kwargs)


def play(env, seed, steps, action_seed=0):
    rng = np.random.default_rng(action_seed)
    out = [env.reset(seed=seed)[0]]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(rng.integers(0, 4, env.n))
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            out.append(env.reset()[0])
    return out


def same(a, b):
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_env_is_deterministic_under_a_seed():
    first, second = play(make(), 7, 120), play(make(), 7, 120)
    assert same(first, second)
    assert not same(first, play(make(), 8, 120))


def test_env_spaces_and_final_info():
    env = make()
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape == (3, 3 + 4 * (4 + 2)) and obs.dtype == np.float32
    assert list(env.action_space.nvec) == [4, 4, 4]
    assert make(share_intents=False, observed=6).observation_space.shape == (3, 3 + 6 * 4)
    for step in range(50):
        obs, reward, terminated, truncated, info = env.step(np.full(3, IDLE))
        assert np.isfinite(reward) and env.observation_space.contains(obs)
        if terminated or truncated:
            break
    assert terminated or (truncated and step == 49)
    assert set(info) == {"collision", "speed", "merged", "shielded"}
    assert info["collision"] == float(terminated) and 0 <= info["merged"] <= 1 and 10 <= info["speed"] <= 30


def test_env_merge_only_on_the_ramp_and_sem_off_executes_the_policy():
    env = make(safety=False)
    env.reset(seed=3)
    main = env.lane[:3] == 0
    env.step(np.full(3, MERGE))
    assert np.array_equal(env.last_action[main], np.full(main.sum(), IDLE))   # MERGE on the main lane: IDLE
    assert (env.lane[:3] == 0).all()
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.integers(0, 3, 3)
        *_, terminated, truncated, info = env.step(a)
        assert np.array_equal(env.last_action, a)
        if terminated or truncated:
            assert info["shielded"] == 0.0
            break


def test_env_rejects_bad_actions_and_settings():
    env = make()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="expected 3 actions in 0..3"):
        env.step(np.array([0, 1, 4]))
    with pytest.raises(ValueError, match="expected 3 actions"):
        env.step(np.array([0, 1]))
    with pytest.raises(ConfigError, match="ramp_agents"):
        make(ramp_agents=(2, 4))
    with pytest.raises(ConfigError, match="intent_points"):
        make(intent_points=11)
    with pytest.raises(ConfigError, match="agent_speed"):
        make(agent_speed=(5.0, 35.0))


def _random_states(env, count, seed):
    """Random dense states (vehicles within 120 m, agents on either lane, speeds in [10, 30], no two vehicles of
    a lane closer than 5 m yet), each with a plan to check: random, or the bold MERGE on the ramp / FASTER."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    made = 0
    while made < count:
        env.x, env.v = rng.uniform(0, 120, len(env.x)), rng.uniform(10, 30, len(env.x))
        env.lane = np.concatenate([rng.integers(0, 2, env.n), np.zeros(env.humans, np.int64)])
        if env._crashed().any() or ((env.lane == 1) & (env.x > 95)).any():
            continue
        env._refresh()
        made += 1
        bold = np.where(env.lane[:env.n] == 1, MERGE, FASTER)
        yield bold if made % 2 else rng.integers(0, 4, env.n)


def _final_rooms(env, executed):
    """Every agent's rooms against the others' intents once every action is fixed (the env's own conventions)."""
    agent_x, _, human_x, _ = env.intents
    n = env.n
    paths = torch.cat([agent_x[torch.arange(n), torch.from_numpy(executed)], human_x])
    lane, x = torch.from_numpy(env.lane), torch.from_numpy(env.x)
    on_ramp = (lane[:n] == 1)[:, None]
    change = env.merge & on_ramp
    target = torch.where(change, 0, lane[:n, None])
    barrier = torch.where(target == 1, env.merge_end + env.threshold, INF).to(torch.float64)
    rooms = safety_rooms(agent_x, x[:n], change, target, barrier, paths[env.others], x[env.others], lane[env.others])
    return torch.where(~env.merge | on_ramp, rooms, -INF)


@pytest.mark.parametrize("agents", [1, 3])
def test_sem_never_lets_a_predicted_collision_through(agents):
    """On random states: a single agent always executes an action predicted safe when one exists; among several
    agents, none keeps a planned action predicted to collide (against everyone's final intents) while another
    available action is predicted safe."""
    env = make(agents=agents, ramp_agents=(0, agents))
    checked = replaced = 0
    for planned in _random_states(env, 120 // agents, agents):
        planned = np.where((planned == MERGE) & (env.lane[:agents] == 0), IDLE, planned)
        agent_x, _, human_x, _ = env.intents
        executed = env._shield(planned, agent_x, human_x)
        replaced += int((executed != planned).sum())
        rooms = _final_rooms(env, executed)
        for i in range(agents):
            if float(rooms[i].max()) < env.threshold:
                continue
            checked += 1
            if agents == 1 or executed[i] == planned[i]:
                assert float(rooms[i, executed[i]]) >= env.threshold
    assert checked >= 80 and replaced >= 10


@pytest.mark.parametrize("policy", ["random", "idle", "faster"])
def test_the_shield_cuts_collisions_to_a_few_percent(policy):
    """Over 60 episodes, the shield keeps any fixed or random policy below 2 % collisions (0–1 % measured over 150
    episodes), and without it the same actions collide in more than a third of the episodes."""
    def collision_rate(safety):
        env, rng, hits = make(safety=safety), np.random.default_rng(0), 0
        for episode in range(60):
            env.reset(seed=episode)
            while True:
                action = {"random": rng.integers(0, 4, 3), "idle": np.full(3, IDLE), "faster": np.full(3, 2)}[policy]
                *_, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    hits += info["collision"]
                    break
        return hits / 60
    assert collision_rate(True) < 0.02
    assert collision_rate(False) > 0.33


# ---------------------------------------------------------------------------------------------- shared actor
def test_shared_actor_scores_each_agent_from_its_own_row():
    from polo.control.policies.base import CONTROL_POLICIES
    env = make()
    policy = CONTROL_POLICIES.build({"name": "shared_actor", "agent": {"name": "categorical", "hidden": [16]}},
                                    "policy").build(
        __import__("gymnasium").spaces.Box(-np.inf, np.inf, (int(np.prod(env.observation_space.shape)),)),
        env.action_space)
    obs = torch.randn(5, int(np.prod(env.observation_space.shape)), generator=torch.Generator().manual_seed(0))
    out = policy.act(obs, torch.Generator().manual_seed(1))
    assert out["action"].shape == out["logp"].shape == (5, 3)
    score = policy.evaluate(obs, {"action": out["action"]})
    assert torch.allclose(score.logp, out["logp"], atol=1e-6) and score.entropy.shape == (5,)
    alone = policy.agent.evaluate(obs.reshape(15, -1)[4:5], {"action": out["action"].reshape(15)[4:5]})
    assert torch.allclose(score.logp[1, 1], alone.logp[0], atol=1e-6)  # row 1, agent 1 = flat row 4
    with pytest.raises(ValueError, match="MultiDiscrete"):
        CONTROL_POLICIES.build({"name": "shared_actor"}, "policy").build(
            __import__("gymnasium").spaces.Box(-1, 1, (6,)), __import__("gymnasium").spaces.Discrete(4))


# ---------------------------------------------------------------------------------------------- method and recipes
SMALL = ["env.num_envs=2", "engine.num_steps=30", "iterations=3", "epochs=2", "minibatches=2", "eval_episodes=3",
         "eval_every=1", "checkpoint_every=1"]


@pytest.mark.parametrize("recipe", ["mappo_pis_merge", "mappo_merge_nosem"])
def test_recipes_train_and_report_the_merge_metrics(tmp_path, recipe):
    ControlTrainer(load_control_recipe(recipe, SMALL[:2] + ["iterations=1", "epochs=1", "minibatches=2",
                                                            "eval_episodes=2"]), tmp_path / "r", log=lambda m: None).run()
    last = metrics_rows(tmp_path / "r")[-1]
    assert {"eval/collision", "eval/speed", "eval/merged", "eval/shielded", "loss/value", "policy/clip_frac"} <= set(last)
    assert checkpoint_steps(tmp_path / "r") and (tmp_path / "r" / "curves.png").is_file()
    assert (last["eval/shielded"] == 0.0) == (recipe == "mappo_merge_nosem")


@pytest.mark.parametrize("critic", ["state", "local_q"])
def test_killed_run_resumes_bit_for_bit(tmp_path, critic):
    extra = [f"critic.input={critic}"] + (["critic.hidden=[32]", "critic.target_every=2", "advantage.lam=1.0",
                                            "engine.bootstrap_truncation='off'"] if critic == "local_q" else [])
    trainer, whole, killed = killed_after("mappo_pis_merge", SMALL + extra, tmp_path, 2)
    trainer.run()
    assert_same_rows(killed, whole)


def test_local_q_advantages_are_monte_carlo_returns_minus_the_target_q():
    recipe = load_control_recipe("mappo_pis_merge", SMALL + ["critic.input=local_q", "critic.hidden=[32]",
                                                             "advantage.lam=1.0", "engine.bootstrap_truncation='off'"])
    method = recipe.method
    method.setup(0, lambda m: None)
    torch.nn.init.normal_(method._critic.out.weight)  # a Q that is not ~0, so that the baseline matters
    method._target.load_state_dict(method._critic.state_dict())
    batch = method.collect()
    n, N, T = 3, 2, 30
    assert batch.values.shape == (N * n, T) and batch.old_logp.shape == (N * n, T)
    result = method._advantage(batch)
    r, d = batch.extras["step_rewards"], batch.extras["dones"]
    g = torch.zeros(N * n)
    expected = torch.zeros(N * n, T)
    g = batch.extras["bootstrap_value"]
    for step in reversed(range(T)):
        g = r[:, step] + 0.99 * (1 - d[:, step]) * g
        expected[:, step] = g
    assert torch.allclose(result.returns, expected, atol=1e-4)
    assert torch.allclose(result.advantages, expected - batch.values, atol=1e-4)
    batch.advantages, batch.returns = result.advantages, result.returns
    steps = method.step_tensors(batch)
    assert steps["advantages"].shape == steps["old_logp"].shape == (N * T, n)
    assert torch.equal(steps["advantages"][:, 1], result.advantages[1::n].reshape(-1))


def test_mappo_refuses_what_it_cannot_run():
    with pytest.raises(ConfigError, match="bootstrap_truncation"):
        load_control_recipe("mappo_pis_merge", SMALL + ["critic.input=local_q", "critic.hidden=[32]"]).method.setup(
            0, lambda m: None)
    with pytest.raises(ConfigError, match="MultiDiscrete"):
        load_control_recipe("mappo_pis_merge", ["env.id=CartPole-v1", "env.kwargs={}", "policy={name: categorical}"]
                            ).method.setup(0, lambda m: None)


# ---- mutation-testing kills

def test_intent_paths_default_floor_is_zero_and_step_index_follows_speed_dtype():
    # v = 0.5, a = −1, dt = 1: speeds 0.5 − k clamp to the default v_min = 0
    _, speeds = intent_paths(torch.tensor(0.0), torch.tensor(0.5), torch.tensor(-1.0), 1.0, 2)
    assert speeds.tolist() == [0.0, 0.0]
    # v float64, accel float32: q = float32(0.1·0.1); the ramp k·q is formed in float64 (k = 3: 3q exactly, not the
    # float32 rounding of 3q)
    a = torch.tensor(0.1, dtype=torch.float32)
    q = float(a * 0.1)
    _, speeds = intent_paths(0.0, torch.tensor(0.0, dtype=torch.float64), a, 0.1, 3)
    assert speeds.tolist() == [q, 2 * q, 3 * q]


def test_safety_rooms_vehicle_level_with_ego_is_not_ahead():
    # ego at 0.7 (python float; 0.7 as float32 is below 0.7), one other vehicle at 0.7 (float64) in the ego's lane,
    # no lane change: it is not ahead → ignored → room = distance to the barrier 10 − 0.7
    ego_paths = torch.tensor([[0.7]], dtype=torch.float64)
    rooms = safety_rooms(ego_paths, 0.7, torch.tensor([False]), torch.tensor([0]), torch.tensor([10.0], dtype=torch.float64),
                         torch.tensor([[0.7]], dtype=torch.float64), torch.tensor([0.7], dtype=torch.float64),
                         torch.tensor([0]))
    torch.testing.assert_close(rooms, torch.tensor([10.0 - 0.7], dtype=torch.float64))


def test_shield_keeps_planned_action_at_exactly_the_threshold():
    rooms = torch.tensor([5.0, 9.0])
    assert shield_action(0, rooms, torch.tensor([True, True]), threshold=5.0) == 0


def test_headway_terms_below_unit_speed_and_dtypes():
    # v = 0.5 (moving), h = 0.3, T_h = 1.2 → log(0.3/0.6) = −ln 2: headway_cost = −ln 2, priority = −½ ln 2
    torch.testing.assert_close(headway_cost(torch.tensor([0.3]), torch.tensor([0.5])), torch.tensor([-math.log(2)]))
    # on_ramp float64 with float32 speeds: the score stays float32
    score = merge_priority(torch.tensor([0.0], dtype=torch.float64), torch.tensor([50.0]), torch.tensor([0.3]),
                           torch.tensor([0.5]), merge_length=100.0)
    assert score.dtype == torch.float32
    torch.testing.assert_close(score, torch.tensor([-0.5 * math.log(2)]))


def test_agent_rewards_use_the_given_ranges_and_keep_speed_dtype():
    # v = 10, speed_range (0, 20) → ½; h = 10, T_h = 2 → log(10/20) = −ln 2, weight 4; x far from the merge end
    # (merge cost ≈ −exp(−10⁶/1000) = 0); not crashed. crashed / on_ramp float64 with float32 speeds → float32
    r = agent_rewards(torch.tensor([0.0], dtype=torch.float64), torch.tensor([10.0]), torch.tensor([10.0]),
                      torch.tensor([0.0], dtype=torch.float64), torch.tensor([0.0]), merge_end=1000.0,
                      merge_length=100.0, headway_time=2.0, speed_range=(0.0, 20.0))
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, torch.tensor([0.5 - 4 * math.log(2)]))
