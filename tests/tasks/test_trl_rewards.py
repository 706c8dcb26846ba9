"""TRL's whole reward interface: reward functions written for TRL's GRPOTrainer run unchanged (completion_ids,
trainer_state, log_metric, conversational completions, None, async), from Python functions as well as names."""
import asyncio
import re
import warnings

import pytest
import torch

from polo.cli import main
from polo.core.registry import ConfigError
from polo.engines.base import EngineSetup, scored
from polo.tasks import Example, RewardSpec, build_task, score
from polo.tasks.reward_calls import RewardContext, TrainerState
from polo.tasks.rewards import RewardError, score_batch
from polo.train.config import load_recipe
from polo.train.stats import rollout_metrics
from polo.train.trainer import Trainer

ADDITION = build_task("addition")


# ----------------------------------------------------------------- five rewards as a TRL user writes them
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


def accuracy_reward(completions, ground_truth, **kwargs):
    matches = [re.search(r"\\boxed\{(.*?)\}", completion) for completion in completions]
    contents = [match.group(1) if match else "" for match in matches]
    return [1.0 if c == gt else 0.0 for c, gt in zip(contents, ground_truth)]


def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    return [1.0 if re.match(pattern, content) else 0.0 for content in completion_contents]


def num_tokens_reward(completion_ids, **kwargs):
    return [float(len(ids)) for ids in completion_ids]


def logged_reward(completions, log_metric, **kwargs):
    rewards = [1.0 if "boxed" in c else 0.0 for c in completions]
    log_metric("boxed_fraction", sum(rewards) / len(rewards))
    return rewards


BOXED = [Example("1+1=", "2", {"ground_truth": "2"}), Example("2+2=", "4", {"ground_truth": "4"})]


def test_trl_user_rewards_run_unchanged_as_python_functions():
    context = RewardContext()
    completions = ["so \\boxed{2}", "it is 5"]
    specs = [RewardSpec.of(reward_len), RewardSpec.of((accuracy_reward, 2.0)), num_tokens_reward, logged_reward]
    rewards, names, weights = score(ADDITION, specs, BOXED, completions, [[5, 6, 2], [7, 2]], context)
    assert names == ("reward_len", "accuracy_reward", "num_tokens_reward", "logged_reward")
    assert weights.tolist() == [1.0, 2.0, 1.0, 1.0]
    assert rewards.tolist() == [[-8.0, 1.0, 3.0, 1.0], [-13.0, 0.0, 2.0, 0.0]]
    assert context.take_metrics() == {"log_metric/boxed_fraction": 0.5} and context.take_metrics() == {}
    assert RewardSpec.of(reward_len).name == "reward_len"  # the same function again is fine


def test_conversational_completions_and_prompts():
    seen = {}

    def spy(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return [0.0] * len(completions)

    messages = ({"role": "system", "content": "Add."}, {"role": "user", "content": "1+1="})
    examples = [Example("Add.\n1+1=", "2", messages=messages)] * 2
    texts = ["<think>easy</think><answer>2</answer>", "2"]
    rewards, _, _ = score(ADDITION, [format_reward, spy, "exact_match", "correct"], examples, texts)
    assert rewards.tolist() == [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]]
    assert seen["completions"] == [[{"role": "assistant", "content": t}] for t in texts]
    assert seen["prompts"] == [[dict(m) for m in messages]] * 2


def test_function_names_are_checked():
    with pytest.raises(ConfigError, match="define it with def"):
        RewardSpec.of(lambda completions, **kwargs: [0.0] * len(completions))

    def exact_match(completions, **kwargs):
        return [0.0] * len(completions)

    with pytest.raises(ConfigError, match="'exact_match'.*already registered.*rename"):
        RewardSpec.of((exact_match, 1.0))


def half_scored(completions, **kwargs):
    return [None if i % 2 else 3.0 for i in range(len(completions))]


def never_scored(completions, **kwargs):
    return [None] * len(completions)


def test_none_is_no_reward_total_is_nansum_and_metrics_average_present_values():
    examples = [Example("1+1=", "2")] * 4
    fields = {"prompt_ids": torch.ones(4, 2, dtype=torch.long), "prompt_mask": torch.ones(4, 2),
              "response_ids": torch.tensor([[5, 2, 0], [6, 7, 2], [5, 0, 0], [9, 9, 9]]),
              "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]]),
              "group": torch.tensor([0, 0, 1, 1]), "truncated": torch.zeros(4, dtype=torch.bool),
              "old_logp": torch.zeros(4, 3)}
    seen = {}

    def ids_spy(completion_ids, **kwargs):
        seen["ids"] = completion_ids
        return [1.0] * len(completion_ids)

    specs = [RewardSpec.of(("correct", 1.0)), RewardSpec.of((half_scored, 0.5)), RewardSpec.of(ids_spy)]
    got = scored(fields, EngineSetup(ADDITION, specs, 2, 3), examples, ["2", "3", "2", "x"], [0, 0, 1, 1])
    batch = got.batch
    assert seen["ids"] == [[5, 2], [6, 7, 2], [5], [9, 9, 9]]  # masked tokens only, stop token kept
    assert batch.extras["reward_present"].tolist() == [[True, True, True], [True, False, True]] * 2
    assert batch.rewards[:, 1].tolist() == [3.0, 0.0, 3.0, 0.0]  # finite: 0 where None
    assert batch.scalar_reward().tolist() == [3.5, 1.0, 3.5, 1.0]  # TRL's nansum of weighted rewards
    batch.advantages = torch.zeros(4, 3)
    row = rollout_metrics(batch, got.correct)
    assert row["reward/half_scored"] == 3.0 and row["reward/correct"] == 0.5 and row["reward/total"] == 2.25


def test_a_sample_no_reward_scores_gets_zero_and_warns_once():
    context = RewardContext()
    with pytest.warns(RuntimeWarning, match="every reward returned None.*'x'.*total reward 0"):
        scores = score_batch(ADDITION, [never_scored, half_scored], [Example("1+1=", "2")] * 2, ["2", "x"],
                             context=context)
    assert scores.values.tolist() == [[0.0, 3.0], [0.0, 0.0]]
    assert scores.present.tolist() == [[False, True], [False, False]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score_batch(ADDITION, [never_scored], [Example("1+1=", "2")], ["2"], context=context)


def test_a_reward_returning_nan_is_still_an_error():
    def nan_reward(completions, **kwargs):
        return [float("nan")] * len(completions)

    with pytest.raises(RewardError, match="'nan_reward'.*non-finite.*return None"):
        score(ADDITION, [nan_reward], BOXED, ["2", "4"])


started: list[str] = []


async def async_first(completions, **kwargs):
    started.append("first")
    await asyncio.sleep(0)
    return [float(len(started))] * len(completions)


async def async_second(completions, trainer_state, **kwargs):
    started.append("second")
    await asyncio.sleep(0)
    return [float(len(started) + trainer_state.global_step)] * len(completions)


async def async_broken(completions, **kwargs):
    await asyncio.sleep(0)
    raise KeyError("judge")


def run_async_rewards():
    started.clear()
    context = RewardContext(TrainerState(global_step=10))
    return score(ADDITION, [async_first, reward_len, async_second], BOXED, ["2", "4"], context=context)[0]


def test_async_rewards_are_awaited_concurrently():
    # each saw both started: the second began before the first finished
    assert run_async_rewards().tolist() == [[2.0, -19.0, 12.0]] * 2
    with pytest.raises(RewardError, match=r"'async_broken'.*raised KeyError: 'judge'"):
        score(ADDITION, [async_first, async_broken], BOXED, ["2", "4"])


def test_async_rewards_from_inside_a_running_event_loop():
    async def notebook_cell():  # a Jupyter cell runs inside an event loop
        return run_async_rewards()

    assert asyncio.run(notebook_cell()).tolist() == [[2.0, -19.0, 12.0]] * 2


def test_trainer_state_and_logged_metrics_follow_the_steps(tiny, tmp_path):
    calls = []

    def step_reward(completions, trainer_state, log_metric, **kwargs):
        calls.append((trainer_state.global_step, trainer_state.max_steps))
        log_metric("seen_step", trainer_state.global_step)
        return [None if i % 2 else float(trainer_state.global_step) for i in range(len(completions))]

    RewardSpec.of(step_reward)
    recipe = load_recipe("grpo", [*tiny, "train.steps=2", "train.eval_every=2", "train.save_every=2",
                                  "rewards=[{name: correct}, {name: step_reward, weight: 0.0}]"])
    rows = Trainer(recipe, tmp_path / "run", log=lambda *_: None).run()
    assert calls[0] == (0, 2)  # the test call before the warm start
    assert sorted({step for step, _ in calls[1:]}) == [0, 1] and calls[-1] == (1, 2)
    assert "log_metric/seen_step" not in rows[0]  # the test call's logs are discarded
    assert [row["log_metric/seen_step"] for row in rows[1:]] == [0.0, 1.0]
    assert [row["reward/step_reward"] for row in rows[1:]] == [0.0, 1.0]  # mean over the scored half


def test_a_broken_reward_fails_before_the_warm_start(tiny, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("POLO_CACHE", str(cache))
    plugin = tmp_path / "broken_reward.py"
    plugin.write_text("from polo.tasks import register_reward\n\n"
                      "@register_reward('test_probe_broken')\n"
                      "def needs_column(completions, ground_truth, **kwargs):\n"
                      "    return [float(c == g) for c, g in zip(completions, ground_truth)]\n")
    code = main(["--plugin", str(plugin), "train", "grpo", *tiny, "train.steps=2",
                 "rewards=[{name: correct}, {name: test_probe_broken}]", "--run-dir", str(tmp_path / "run")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: reward 'test_probe_broken' (needs_column) raised TypeError") and \
        "ground_truth" in lines[0]
    assert not (cache / "warm_start").exists()  # nothing was trained


def test_values_logged_elsewhere_join_a_context_and_average_with_its_own():
    context = RewardContext()
    context.log_metric("mean_chars", 1.0)
    context.log_all({"mean_chars": [2.0, 6.0], "other": [4.0]})  # e.g. two Ray workers' shares
    assert context.take_metrics() == {"log_metric/mean_chars": 3.0, "log_metric/other": 4.0}
