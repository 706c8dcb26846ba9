"""The contract every built-in keeps: determinism, solving experts, noisy experts, episode ends, the registry."""
import random

import pytest

from polo.core.registry import ConfigError
from polo.envs import (ENVIRONMENTS, Environment, Transition, expert_policy, make, noisy_expert, play,
                       register_environment, render_context)

CONFIGS = [{"name": "TextGrid-v0"}, {"name": "TextGrid-v0", "obs_mode": "local"}, {"name": "KBLookup-v0"},
           {"name": "KBLookup-v0", "memory": True, "skills": True}, {"name": "GuessNum-v0"}]


def flat(transcript):
    return [(c, a, r.observation, r.reward, r.terminated, r.truncated, r.info) for c, a, r in transcript.steps]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_same_seed_and_actions_give_the_same_transcript(config):
    runs = [play(make(config), 5, noisy_expert(0.5, random.Random(3))) for _ in range(2)]
    assert flat(runs[0]) == flat(runs[1]) and runs[0].steps
    replay = make(config)
    replay.reset(5)
    assert [replay.step(a) for _, a, _ in runs[0].steps] == [r for _, _, r in runs[0].steps]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_expert_solves_200_seeds(config):
    # (TextGrid layouts farther than max_steps exist: 2 in the first 5000 seeds need 13 steps; none among these 200.)
    env = make(config)
    assert all(play(env, seed, expert_policy).success for seed in range(200))


@pytest.mark.parametrize("name", ["TextGrid-v0", "KBLookup-v0", "GuessNum-v0"])
def test_noisy_expert_gives_varied_outcomes(name):
    env = make(name)
    outcomes = {seed: [play(env, seed, noisy_expert(0.3, random.Random(100 * seed + i))).success for i in range(8)]
                for seed in range(20)}
    assert any(True in runs and False in runs for runs in outcomes.values())
    expert_actions = [a for _, a, _ in play(env, 0, expert_policy).steps]
    noisy_actions = [[a for _, a, _ in play(env, 0, noisy_expert(0.3, random.Random(i))).steps] for i in range(8)]
    assert expert_actions in noisy_actions and any(actions != expert_actions for actions in noisy_actions)


def test_noisy_expert_takes_only_valid_actions_and_checks_epsilon():
    env = make("GuessNum-v0")
    run = play(env, 0, noisy_expert(1.0, random.Random(0)))
    assert all(r.info["valid"] for _, _, r in run.steps)
    with pytest.raises(ValueError, match="1.5"):
        noisy_expert(1.5, random.Random(0))


def test_step_before_reset_and_after_the_end_raise():
    env = make("GuessNum-v0")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("c?")
    env.reset(0)
    env.step("=7")
    with pytest.raises(RuntimeError, match="ended after 1 steps"):
        env.step("c?")
    with pytest.raises(RuntimeError, match="ended"):
        env.expert()
    assert env.reset(0) == "u: guess my number 1-16" and env.step("c?").observation == "u: it is small"


def test_render_context_keeps_the_prompt_and_the_last_window_turns():
    history = [("a1", "o1"), ("a2", "o2"), ("a3", "o3")]
    assert render_context("p", history) == "p|a1;o1|a2;o2|a3;o3"
    assert render_context("p", history, window=2) == "p|a2;o2|a3;o3"
    assert render_context("p", history, window=0) == render_context("p", []) == "p"
    with pytest.raises(ValueError, match="-1"):
        render_context("p", history, window=-1)
    env = make("TextGrid-v0")
    run = play(env, 0, expert_policy, window=1)
    assert [c for c, _, _ in run.steps] == ["r0c2 g:r3c2", "r0c2 g:r3c2|s;r1c2 g:r3c2", "r0c2 g:r3c2|s;r2c2 g:r3c2"]


def test_make_takes_a_name_a_mapping_and_keyword_overrides():
    assert make({"name": "TextGrid-v0", "obs_mode": "local"}).obs_mode == "local"
    assert make({"name": "TextGrid-v0", "obs_mode": "local"}, obs_mode="global").obs_mode == "global"
    assert make("KBLookup-v0", memory=True).memory and make("KBLookup-v0").max_turns == 4


def test_registry_errors_name_the_bad_value():
    with pytest.raises(ConfigError, match="GuessNum-v0, KBLookup-v0, TextGrid-v0"):
        make("TextGrid-v1")
    with pytest.raises(ConfigError, match="did you mean environment.obs_mode"):
        make("TextGrid-v0", obs_mod="local")
    with pytest.raises(ConfigError, match="environment.obs_mode.*'egocentric'"):
        make("TextGrid-v0", obs_mode="egocentric")
    with pytest.raises(ConfigError, match="environment.N"):
        make("GuessNum-v0", N=1)
    with pytest.raises(ConfigError, match="expected a name or a mapping"):
        make(["TextGrid-v0"])


def test_register_environment_adds_a_plugin():
    @register_environment("Echo-test")
    class Echo(Environment):
        @property
        def turn_limit(self):
            return 2

        def _generate(self, rng):
            return f"say {rng.randrange(10)}"

        def _transition(self, action):
            return Transition(action, float(action == self.prompt[4:]), terminated=action == self.prompt[4:])

    try:
        env = make("Echo-test")
        assert env.reset(0) == "say 6" and env.step("6") == ("6", 1.0, True, False, {
            "valid": True, "tool_error": False, "anchor_obs": "say 6"})
        with pytest.raises(NotImplementedError, match="Echo-test has no scripted expert"):
            env.expert()
        with pytest.raises(TypeError, match="subclass of polo.envs.Environment"):
            register_environment("bad")(dict)
    finally:
        ENVIRONMENTS._registered.pop("Echo-test")
