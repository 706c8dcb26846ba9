"""Reward registry, generic rewards, TRL-signature custom rewards and batch scoring."""
import math
import sys

import pytest
import torch

from polo.core.registry import ConfigError
from polo.tasks.rewards import RewardError
from polo.tasks import Example, RewardSpec, build_task, get_reward, register_reward, reward_names, score

ADDITION = build_task("addition")
EXAMPLES = [Example("37+48=", "85"), Example("1+2=", "3")]


def call(name, completions, answers):
    return get_reward(name)(prompts=[""] * len(answers), completions=completions, answer=answers)


def test_generic_rewards():
    generic = {"exact_match", "numeric_match", "contains_answer", "digit_match", "char_match"}
    assert generic <= set(reward_names())
    assert call("exact_match", [" 85\n", "86", ""], ["85"] * 3) == [1.0, 0.0, 0.0]
    completions = ["It is 85.", "85.0", "-3", "no number", "8 5"]
    numeric = call("numeric_match", completions, ["85", "85", "-3", "85", "85"])
    assert numeric == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert call("numeric_match", ["85"], ["eighty-five"]) == [0.0]
    assert call("contains_answer", ["the answer: 85!", "8 5"], ["85", "85"]) == [1.0, 0.0]
    assert call("digit_match", ["85", "", " "], ["85", "", "0"]) == [1.0, 1.0, 0.0]
    # one float64 division each side, both correctly rounded: equal to within an ulp (eps64)
    assert call("char_match", ["abc", "abd", "abcd"], ["abc"] * 3) == pytest.approx([1.0, 2 / 3, 3 / 4],
                                                                                      rel=math.ulp(1.0), abs=0)


def test_vul_format_wants_reasoning_then_one_verdict():
    completions = ["<think>a\nb</think> HAS_VUL", " <think>x</think>\nverdict: NO_VUL.", "HAS_VUL",
                   "<think>x</think>", "<think>x</think>NO_VUL and HAS_VUL", "<think>x</think>NO_VULx", "<think>NO_VUL"]
    assert call("vul_format", completions, [""] * 7) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_score_shapes_names_and_weights():
    specs = [("correct", 1.0), {"name": "digit_match", "weight": 0.5}]
    rewards, names, weights = score(ADDITION, specs, EXAMPLES, ["85", "4"])
    assert rewards.dtype == torch.float32 and rewards.shape == (2, 2)
    assert names == ("correct", "digit_match")
    assert weights.dtype == torch.float32 and weights.tolist() == [1.0, 0.5]
    assert rewards.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    empty, _, _ = score(ADDITION, ["correct", "exact_match"], [], [])
    assert empty.shape == (0, 2)


def test_trl_reward_runs_unchanged_and_receives_every_column():
    seen = {}

    # written exactly as for TRL's GRPOTrainer: keyword-called, extra columns arrive in **kwargs
    def reward_len(completions, **kwargs):
        seen.update(kwargs)
        return [-abs(3 - len(completion)) for completion in completions]

    register_reward("test_trl_reward_len")(reward_len)
    examples = [
        Example("1+1=", "2", {"level": 1, "tag": "a"}),
        Example("9+9=", "18", {"level": 2, "tag": "b"}),
    ]
    rewards, names, _ = score(ADDITION, [RewardSpec("test_trl_reward_len", 2.0)], examples, ["2", "18xx"])
    assert rewards[:, 0].tolist() == [-2.0, -1.0] and names == ("test_trl_reward_len",)
    assert seen["prompts"] == ["1+1=", "9+9="] and seen["answer"] == ["2", "18"]
    assert seen["level"] == [1, 2] and seen["tag"] == ["a", "b"]


@pytest.mark.parametrize(
    "name, returned, message",
    [
        ("test_short_reward", [1.0], "returned 1 values for a batch of 2"),
        ("test_nan_reward", [1.0, math.nan], "non-finite"),
        ("test_str_item_reward", [1.0, "high"], "must return a list of floats or None"),
        ("test_none_reward", None, "must return a list of B numbers, got a NoneType"),
        ("test_dict_reward", {"1.0": 0, "0.0": 1}, "must return a list of B numbers, got a dict"),
        ("test_string_reward", "10", "must return a list of B numbers, got a str"),
    ],
)
def test_bad_reward_outputs_name_the_reward(name, returned, message):
    register_reward(name)(lambda prompts, completions, **kwargs: returned)
    with pytest.raises(RewardError, match=f"reward '{name}'.*{message}"):
        score(ADDITION, [name], EXAMPLES, ["85", "3"])


def test_tensor_and_tuple_rewards_are_numbers():
    register_reward("test_tensor_reward")(lambda prompts, completions, **kwargs: torch.tensor([0.5, 1.0]))
    register_reward("test_tuple_reward")(lambda prompts, completions, **kwargs: (1, 0))
    rewards, _, _ = score(ADDITION, ["test_tensor_reward", "test_tuple_reward"], EXAMPLES, ["85", "3"])
    assert rewards.tolist() == [[0.5, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize("name, body, message", [
    ("test_exit0_reward", lambda: sys.exit(0), r"called sys.exit\(0\)"),
    ("test_exit_text_reward", lambda: sys.exit("bye"), r"called sys.exit\('bye'\)"),
    ("test_raising_reward", lambda: 1 / 0, "raised ZeroDivisionError: division by zero"),
])
def test_a_reward_that_exits_or_raises_is_a_reward_error(name, body, message):
    """``SystemExit(0)`` inside a reward would end the run with status 0 (and an arena would mark it done)."""
    register_reward(name)(lambda prompts, completions, **kwargs: body())
    with pytest.raises(RewardError, match=f"reward '{name}'.*{message}"):
        score(ADDITION, [name], EXAMPLES, ["85", "3"])


def test_score_errors():
    with pytest.raises(ConfigError, match="unknown reward 'nope'.*correct.*exact_match"):
        score(ADDITION, ["nope"], EXAMPLES, ["85", "3"])
    with pytest.raises(ValueError, match="2 examples but 1 completions"):
        score(ADDITION, ["correct"], EXAMPLES, ["85"])
    with pytest.raises(ValueError, match="no rewards"):
        score(ADDITION, [], EXAMPLES, ["85", "3"])
    with pytest.raises(ValueError, match="different columns.*'x'"):
        score(ADDITION, ["correct"], [Example("a", "b", {"x": 1}), Example("a", "b")], ["", ""])
    with pytest.raises(ConfigError, match="weight.*'heavy'"):
        score(ADDITION, [("correct", "heavy")], EXAMPLES, ["85", "3"])
    with pytest.raises(ConfigError, match="'wieght'"):
        score(ADDITION, [{"name": "correct", "wieght": 1.0}], EXAMPLES, ["85", "3"])
    with pytest.raises(ConfigError, match="unknown reward 'zzz'.*valid reward names"):
        get_reward("zzz")
    with pytest.raises(ValueError, match="already registered"):
        register_reward("exact_match")(lambda prompts, completions, **kwargs: [])


def test_task_rewards_shadow_registered_ones_for_that_task_only():
    countdown = build_task("countdown")
    ex = Example("3 5 7>56:", "56", {"numbers": (3, 5, 7), "solution": "(3+5)*7"})
    rewards, _, _ = score(countdown, ["correct", "exact_match"], [ex], ["(3+5)*7"])
    assert rewards.tolist() == [[1.0, 0.0]]
    with pytest.raises(ConfigError, match="unknown reward 'format' for task 'addition'"):
        score(ADDITION, ["format"], EXAMPLES, ["85", "3"])
