"""The ``gym`` engine: time-major storage handed over as ``[N, T]`` rows, episode ends and same-step autoreset,
the truncation bootstrap, factored log-probs, and the environment state round trip."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from polo.core.registry import ConfigError
from polo.control.envs.vector import EnvSettings
from polo.control.policies.base import CONTROL_POLICIES
from polo.control.engines.base import CONTROL_ENGINES
from polo.engines.base import ENGINES
from polo.control.engines.gym import action_rows

COUNTER = "polo_test/Counter-v0"
GAMMA = 0.9


class Counter(gym.Env):
    """Observation ``[k, id, e]``: the step within the episode, the copy's id (its reset seed) and the episode
    number; reward k after the step (1, 2, 3, …); terminates after ``terminate_after`` steps unless the copy's id is
    in ``never_terminate`` (a time limit, ``max_episode_steps``, then truncates it)."""

    def __init__(self, terminate_after: int | None = None, never_terminate: tuple = (), actions: str = "box"):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = {"box": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
                             "multidiscrete": gym.spaces.MultiDiscrete([3, 2]),
                             "discrete": gym.spaces.Discrete(3)}[actions]
        self.terminate_after, self.never_terminate = terminate_after, tuple(never_terminate)
        self._id, self._episode, self._k = 0, -1, 0

    def _obs(self):
        return np.array([self._k, self._id, self._episode], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._id = seed
        self._k, self._episode = 0, self._episode + 1
        return self._obs(), {}

    def step(self, action):
        self._k += 1
        terminated = (self.terminate_after is not None and self._id not in self.never_terminate
                      and self._k >= self.terminate_after)
        return self._obs(), float(self._k), terminated, False, {}


if COUNTER not in gym.registry:
    gym.register(id=COUNTER, entry_point=Counter)


def critic(obs: torch.Tensor) -> torch.Tensor:
    """A fixed value function that tells the observations apart: ``V = 100·k + 10·id + e``."""
    return 100 * obs[:, 0] + 10 * obs[:, 1] + obs[:, 2]


def engine(num_envs=2, num_steps=7, seed=0, bootstrap="off", env_id=COUNTER, plain=True, **kwargs):
    """A started ``gym`` engine; ``plain``: no observation / reward normalisation (the raw counter values)."""
    eng = CONTROL_ENGINES.build({"name": "gym", "num_steps": num_steps, "bootstrap_truncation": bootstrap}, "engine")
    wrappers = {"normalize_obs": False, "normalize_reward": False} if plain else {}
    eng.start(EnvSettings(id=env_id, num_envs=num_envs, kwargs=kwargs, **wrappers), GAMMA, seed)
    return eng


def policy_for(eng, name="gaussian", **settings):
    torch.manual_seed(0)
    envs = eng.envs
    return CONTROL_POLICIES.build({"name": name, **settings}, "policy").build(envs.single_observation_space,
                                                                            envs.single_action_space)


def test_time_major_storage_becomes_one_row_per_copy():
    eng = engine(num_envs=3, num_steps=5, seed=10, terminate_after=3)
    policy = policy_for(eng)
    batch = eng.rollout(policy, critic, torch.Generator().manual_seed(0))
    obs = batch.extras["obs"]
    assert obs.shape == (3, 5, 3) and batch.old_logp.shape == (3, 5) and batch.values.shape == (3, 5)
    assert batch.extras["act.action"].shape == (3, 5, 1) and batch.extras["step_rewards"].shape == (3, 5)
    assert batch.response_mask.shape == (3, 5) and torch.equal(batch.group, torch.arange(3))
    assert torch.equal(obs[:, :, 1], torch.tensor([[10.0] * 5, [11.0] * 5, [12.0] * 5]))  # row i = copy i (seed + i)
    assert torch.equal(obs[0, :, 0], torch.tensor([0.0, 1, 2, 0, 1]))
    assert torch.equal(batch.extras["step_rewards"], torch.tensor([[1.0, 2, 3, 1, 2]]).expand(3, 5))
    assert torch.equal(batch.rewards[:, 0], batch.extras["step_rewards"].sum(1))
    assert torch.equal(batch.values, critic(obs.reshape(-1, 3)).reshape(3, 5))
    # each row's stored log-prob scores that row's own stored action at that row's own observation
    score = policy.evaluate(obs.reshape(-1, 3), {"action": batch.extras["act.action"].reshape(-1, 1)})
    torch.testing.assert_close(score.logp.reshape(3, 5), batch.old_logp, rtol=0, atol=1e-5)
    assert "act.logp" not in batch.extras


def test_dones_mark_episode_ends_and_the_next_observation_is_the_new_episodes_first():
    eng = engine(num_envs=2, num_steps=7, terminate_after=3)
    batch = eng.rollout(policy_for(eng), critic, torch.Generator().manual_seed(0))
    assert torch.equal(batch.extras["dones"], torch.tensor([[0.0, 0, 1, 0, 0, 1, 0]]).expand(2, 7))
    obs = batch.extras["obs"]
    assert torch.equal(obs[0, :, 0], torch.tensor([0.0, 1, 2, 0, 1, 2, 0]))  # same-step autoreset: k = 0 after a done
    assert torch.equal(obs[0, :, 2], torch.tensor([0.0, 0, 0, 1, 1, 1, 2]))  # ... of the next episode
    assert sorted(eng.take_episodes()) == [(6.0, 3)] * 4 and eng.take_episodes() == []


def test_bootstrap_value_is_the_value_of_the_next_rollouts_first_observation():
    eng = engine(num_envs=2, num_steps=4, terminate_after=3)
    policy, gen = policy_for(eng), torch.Generator().manual_seed(0)
    first = eng.rollout(policy, critic, gen)
    second = eng.rollout(policy, critic, gen)
    assert torch.equal(first.extras["bootstrap_value"], critic(second.extras["obs"][:, 0]))
    assert torch.equal(second.extras["obs"][0, :, 0], torch.tensor([1.0, 2, 0, 1]))


@pytest.mark.parametrize("mode", ["final_obs", "current_obs"])
def test_bootstrap_truncation_adds_gamma_v_only_on_truncated_steps(mode):
    # copy 0 (id 0) terminates after 2 steps; copy 1 (id 1) never terminates and the time limit cuts it after 3
    settings = dict(num_envs=2, num_steps=6, terminate_after=2, never_terminate=(1,), max_episode_steps=3)
    plain_eng, boot_eng = engine(**settings), engine(bootstrap=mode, **settings)
    policy = policy_for(plain_eng)
    plain = plain_eng.rollout(policy, critic, torch.Generator().manual_seed(0))
    boot = boot_eng.rollout(policy, critic, torch.Generator().manual_seed(0))
    assert torch.equal(plain.extras["dones"], torch.tensor([[0.0, 1, 0, 1, 0, 1], [0, 0, 1, 0, 0, 1]]))
    assert torch.equal(boot.extras["dones"], plain.extras["dones"])
    added = boot.extras["step_rewards"] - plain.extras["step_rewards"]
    if mode == "final_obs":  # V of the observation the truncated episode ended in: k = 3, id 1, episode 0 / 1
        expected = GAMMA * critic(torch.tensor([[3.0, 1, 0], [3.0, 1, 1]]))
    else:  # PolicyFlow's form: V of the observation the truncated step started from (k = 2)
        expected = GAMMA * critic(torch.tensor([[2.0, 1, 0], [2.0, 1, 1]]))
    torch.testing.assert_close(added[1, [2, 5]], expected)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, [2, 5]] = False
    assert torch.equal(added[mask], torch.zeros(10))  # terminated steps (copy 0) and all others: nothing added


def test_bootstrap_truncation_rejects_unknown_modes():
    with pytest.raises(ConfigError, match="bootstrap_truncation.*'off', 'final_obs' or 'current_obs'"):
        CONTROL_ENGINES.build({"name": "gym", "bootstrap_truncation": "final"}, "engine")


@pytest.mark.parametrize("actions,settings,logp_shape,action_shape", [
    ("multidiscrete", {}, (2, 5, 2), (2, 5, 2)),
    ("multidiscrete", {"joint": True}, (2, 5), (2, 5, 2)),
    ("discrete", {}, (2, 5), (2, 5)),
])
def test_log_prob_shapes_of_factored_and_joint_policies(actions, settings, logp_shape, action_shape):
    eng = engine(num_envs=2, num_steps=5, terminate_after=3, actions=actions)
    policy = policy_for(eng, "categorical", hidden=[8], **settings)
    batch = eng.rollout(policy, critic, torch.Generator().manual_seed(0))
    assert batch.old_logp.shape == logp_shape and batch.extras["act.action"].shape == action_shape
    assert batch.extras["act.action"].dtype == torch.int64
    flat = batch.old_logp.reshape(10, *logp_shape[2:])
    rows = action_rows(flat, torch.arange(10.0))
    factors = logp_shape[2] if len(logp_shape) == 3 else 1
    assert rows.old_logp.shape == (10, factors) and torch.equal(rows.advantages[:, -1], torch.arange(10.0))
    score = policy.evaluate(batch.extras["obs"].reshape(10, 3),
                            {"action": batch.extras["act.action"].reshape(10, *action_shape[2:])})
    torch.testing.assert_close(score.logp, flat, rtol=0, atol=1e-5)


def _same_batch(a, b):
    for key in ("old_logp", "values", "rewards"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert a.extras.keys() == b.extras.keys()
    for key in a.extras:
        assert torch.equal(a.extras[key], b.extras[key]), key


@pytest.mark.parametrize("env_id,kwargs", [("Pendulum-v1", {}), (COUNTER, {"terminate_after": 3})])
def test_state_round_trip_gives_identical_next_rollouts(env_id, kwargs):
    # the full wrapper chain: the running observation and reward statistics travel with the state
    eng = engine(num_envs=2, num_steps=50, env_id=env_id, plain=False, **kwargs)
    policy, value = policy_for(eng), lambda obs: obs.sum(-1)
    gen = torch.Generator().manual_seed(0)
    eng.rollout(policy, value, gen)
    state, gen_state = eng.state(), gen.get_state()
    expected = eng.rollout(policy, value, gen)
    after = eng.rollout(policy, value, gen)
    eng.load_state(state)  # the same engine, rewound
    gen.set_state(gen_state)
    _same_batch(eng.rollout(policy, value, gen), expected)
    _same_batch(eng.rollout(policy, value, gen), after)
    fresh = engine(num_envs=2, num_steps=50, env_id=env_id, plain=False, seed=123, **kwargs)  # another engine
    fresh.load_state(state)
    gen.set_state(gen_state)
    _same_batch(fresh.rollout(policy, value, gen), expected)


def test_language_model_recipes_do_not_know_the_gym_engine():
    with pytest.raises(ConfigError, match="unknown engine 'gym'"):
        ENGINES.build({"name": "gym"}, "engine")
    assert CONTROL_ENGINES.names() == ["gym"]
