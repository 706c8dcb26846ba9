"""GymTextEnvironment: a gymnasium-style text environment behind the polo contract, without gymnasium."""
import pytest

from polo.envs import GymTextEnvironment, expert_policy, play


class Countdown:
    """Gymnasium-style: reach 0 by sending "dec"; "boom" ends in failure; reports its own truncation at 5."""

    def reset(self, seed=None):
        self.n, self.t = 2 + seed, 0
        return f"n={self.n}", {}

    def step(self, action):
        self.t += 1
        if action == "boom":
            return "exploded", -1.0, True, False, {"tool_error": True}
        if action != "dec":
            return f"n={self.n}", 0.0, False, self.t >= 5, {"valid": False}
        self.n -= 1
        return f"n={self.n}", float(self.n == 0), self.n == 0, False, {"left": self.n}


def test_wraps_reset_step_and_info():
    env = GymTextEnvironment(env=Countdown())
    assert env.reset(1) == "n=3" and env.prompt == "n=3"
    obs, reward, terminated, truncated, info = env.step("dec")
    assert (obs, reward, terminated, truncated) == ("n=2", 0.0, False, False)
    assert info == {"valid": True, "tool_error": False, "anchor_obs": "n=3", "left": 2}
    assert not env.step("x").info["valid"]
    assert env.step("dec").observation == "n=1" and env.step("dec").terminated and env.success


def test_failure_own_truncation_and_turn_cap():
    env = GymTextEnvironment(env=Countdown())
    env.reset(0)
    boom = env.step("boom")
    assert boom.terminated and boom.info["tool_error"] and not env.success
    env.reset(5)
    assert [env.step("x").truncated for _ in range(5)] == [False] * 4 + [True]
    capped = GymTextEnvironment(env=Countdown(), max_turns=2)
    capped.reset(5)
    assert [capped.step("x").truncated for _ in range(2)] == [False, True]


def test_no_expert_and_text_observations_only():
    env = GymTextEnvironment(env=Countdown())
    env.reset(0)
    with pytest.raises(NotImplementedError, match="no scripted expert"):
        play(env, 0, expert_policy)

    class Pixels(Countdown):
        def reset(self, seed=None):
            return [0, 1], {}

    with pytest.raises(TypeError, match="Pixels: expected a text observation, got list"):
        GymTextEnvironment(env=Pixels()).reset(0)
