"""GuessNum-v0: the golden dialogues, candidate sets, information-gain bits and judge scores."""
import math

import pytest

from polo.envs import expert_policy, make, play


def test_seed0_expert_golden():
    env = make("GuessNum-v0")
    run = play(env, 0, expert_policy)
    assert env.prompt == "u: guess my number 1-16" and env.gold == "7"
    assert [(a, r.observation) for _, a, r in run.steps] == [
        ("c?", "u: it is small"), (">4?", "u: yes"), (">6?", "u: yes"), (">7?", "u: no"), ("=7", "u: correct")]
    assert [r.info["judge_score"] for _, _, r in run.steps] == [0.25, 0.25, 0.25, 0.25, 0.0]
    assert [r.info["candidates"] for _, _, r in run.steps][:2] == [tuple(range(1, 9)), (5, 6, 7, 8)]
    assert run.success and run.total_reward == 1.0 and run.steps[-1][2].terminated


def test_seed1_scripted_golden():
    env = make("GuessNum-v0")
    env.reset(1)
    steps = [env.step(a) for a in [">8?", "c?", "=5", ">3?", "=3"]]
    assert [s.observation for s in steps] == ["u: no", "u: it is odd", "u: wrong", "u: no", "u: correct"]
    assert [round(s.info["judge_score"], 4) for s in steps] == [0.25, 0.25, 0.1038, 0.1462, 0.25]
    assert steps[2].info["ig_bits"] == pytest.approx(math.log2(4 / 3)) and round(steps[2].info["ig_bits"], 3) == 0.415
    assert [s.reward for s in steps] == [0.0, 0.0, 0.0, 0.0, 1.0] and env.gold == "3"


@pytest.mark.parametrize("action", ["hello", ">17?", "=0", ">07?", "=", "c"])
def test_invalid_actions(action):
    env = make("GuessNum-v0")
    env.reset(1)
    result = env.step(action)
    assert result.observation == "u: ??" and not result.info["valid"] and result.info["ig_bits"] == 0.0
    assert len(result.info["candidates"]) == 16


def test_truncated_at_max_turns():
    env = make("GuessNum-v0", max_turns=2)
    env.reset(0)
    assert env.step("=1").truncated is False and env.step("=2").truncated is True
