"""Environment snapshots: on every built-in environment (deterministic and copyable) restoring a snapshot reaches
the state a replay of the same actions reaches, and the two go on identically; GymTextEnvironment snapshots
through the wrapped object's own methods, a deep copy only when declared safe, and none otherwise."""
import copy
import random

import pytest

from polo.envs import ENVIRONMENTS, Environment, GymTextEnvironment, make, noisy_expert
from polo.tasks.environment import sandbox_tester

BUILT_IN = [{"name": "TextGrid-v0", "obs_mode": "local"}, {"name": "GuessNum-v0", "teacher_hints": True},
            {"name": "KBLookup-v0", "memory": True}, {"name": "KBLookup-v0", "skills": True},
            {"name": "CodeFix-v0", "runner": "python"}, {"name": "GuardedKB-v0"}]


def test_every_registered_environment_is_covered_and_declares_itself():
    names = {config["name"] for config in BUILT_IN}
    assert names == set(ENVIRONMENTS.names()) - {"gym", "tools"}  # the wrappers of a user's environment
    for name in names:
        cls = ENVIRONMENTS.get(name)
        assert cls.deterministic and cls.copyable
    assert not Environment.deterministic and not Environment.copyable


@pytest.mark.parametrize("config", BUILT_IN, ids=lambda c: "-".join(v if k == "name" else f"{k}={v}"
                                                                     for k, v in c.items()))
def test_restoring_a_snapshot_reaches_the_state_a_replay_reaches(config):
    for seed in range(3):
        env, rng = make(config, sandbox_tester), random.Random(seed)
        policy, actions, snapshots = noisy_expert(0.5, rng), [], []
        env.reset(seed)
        while not env.done:
            snapshots.append(env.snapshot())
            actions.append(policy(env, ""))
            env.step(actions[-1])
        for k, snapshot in enumerate(snapshots):
            replayed, restored, again = (make(config, sandbox_tester) for _ in range(3))
            replayed.reset(seed)
            for action in actions[:k]:
                replayed.step(action)
            restored.restore(snapshot)
            again.restore(snapshot)
            assert restored.__pydantic_private__ == replayed.__pydantic_private__, (seed, k)
            rest = [tuple(restored.step(a)) for a in actions[k:]]  # stepping a restored one leaves the snapshot as is
            assert rest == [tuple(replayed.step(a)) for a in actions[k:]] == [tuple(again.step(a)) for a in actions[k:]]
            assert restored.__pydantic_private__ == replayed.__pydantic_private__ and restored.done


class Counter:
    """Gymnasium-style: "inc" adds one to n; the episode ends at n = 3."""

    def reset(self, seed=None):
        self.n = seed
        return f"n={self.n}", {}

    def step(self, action):
        self.n += action == "inc"
        return f"n={self.n}", 1.0, self.n >= 3, False, {}


class OwnSnapshot(Counter):
    def snapshot(self):
        return {"n": self.n}

    def restore(self, state):
        self.n = state["n"]


class OwnGetState(Counter):
    def get_state(self):
        return self.n

    def set_state(self, state):
        self.n = state


@pytest.mark.parametrize("wrapped, knobs", [(OwnSnapshot, {}), (OwnGetState, {}), (Counter, {"copy_state": True})])
def test_gym_adapter_snapshots_through_the_wrapped_object(wrapped, knobs):
    env = GymTextEnvironment(env=wrapped(), **knobs)
    assert env.can_snapshot
    env.reset(0)
    env.step("inc")
    state = env.snapshot()
    env.step("inc")
    fresh = GymTextEnvironment(env=wrapped(), **knobs)
    fresh.restore(state)
    assert (fresh.env.n, fresh._t, fresh.prompt) == (1, 1, "n=0")
    assert fresh.step("inc").observation == "n=2" and not fresh.done
    twice = GymTextEnvironment(env=wrapped(), **knobs)
    twice.restore(state)  # the first restore's steps did not change the state
    assert twice.env.n == 1 and twice.step("inc").info["anchor_obs"] == "n=1"


def test_gym_adapter_without_state_methods_offers_no_snapshot():
    env = GymTextEnvironment(env=Counter())
    env.reset(0)
    assert not env.can_snapshot and not env.deterministic
    with pytest.raises(NotImplementedError, match="Counter has no snapshot.*or set copy_state=True"):
        env.snapshot()


def test_an_environment_that_is_not_copyable_offers_no_snapshot():
    class Plain(Environment):
        pass

    with pytest.raises(NotImplementedError, match="Plain offers no snapshot.*copyable = True"):
        Plain().snapshot()
    assert not Plain().can_snapshot

    class Own(Plain):
        def snapshot(self):
            return copy.deepcopy(self._t)

    assert Own().can_snapshot
