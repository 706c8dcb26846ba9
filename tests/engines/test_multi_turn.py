"""The multi_turn engine: episodes of a text environment played in lock-step and returned as step rows."""
import pytest
import torch

from polo.cli import main
from polo.core.registry import ConfigError
from polo.envs import TURN_SEP
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.base import ENGINES, EngineSetup
from polo.tasks import RewardSpec, build_task
from polo.train.agent_metrics import episode_metrics
from polo.train.metrics import read_metrics

TEXTGRID = {"name": "environment", "env": {"name": "TextGrid-v0", "obs_mode": "local"}}


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=256))


def engine_for(task_config, G=4, reward_specs=()):
    task = build_task(task_config)
    engine = ENGINES.build({"name": "multi_turn"}, "engine")
    engine.setup(EngineSetup(task, list(reward_specs), G, task.max_completion_chars + 1))
    return task, engine


def test_step_rows_record_every_turn_of_every_episode(policy):
    task, engine = engine_for(TEXTGRID, G=4)
    examples = task.examples("train", 3, seed=0)
    got = engine.rollout(policy, examples, [5, 6, 7], torch.Generator().manual_seed(0))
    b, x = got.batch, got.batch.extras
    N = b.batch_size
    assert N == len(got.completions) == len(got.examples) and N >= 12  # 12 episodes of at least one turn
    assert sorted(set(x["traj"].tolist())) == list(range(12))
    assert b.group.tolist() == [t // 4 for t in x["traj"].tolist()]  # G = 4 consecutive episodes per example
    assert x["prompt_index"].tolist() == [[5, 6, 7][g] for g in b.group.tolist()]
    for t in range(12):  # each episode's rows: turns 0..n-1, one return, one outcome
        rows = (x["traj"] == t).nonzero().squeeze(-1)
        assert sorted(x["step"][rows].tolist()) == list(range(len(rows)))
        assert b.rewards[rows].unique().numel() == 1 and x["correct"][rows].unique().numel() == 1
        assert len(rows) <= task.make_env().turn_limit
        assert float(b.rewards[rows[0], 0]) == pytest.approx(float(x["step_reward"][rows].sum()))
    # responses are policy tokens only (all trainable); the per-token turn index is the row's step
    assert ((b.turn >= 0) == b.response_mask.bool()).all()
    assert (b.turn.max(1).values == x["step"]).all()
    assert (b.old_logp[b.response_mask.bool()] <= 0).all() and (b.old_logp[~b.response_mask.bool()] == 0).all()
    # replaying each episode's actions gives back every row's context, observation and step reward
    texts = policy.tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in zip(b.prompt_ids, b.prompt_mask)],
                                          skip_special_tokens=True)
    for t in range(12):
        rows = sorted((x["traj"] == t).nonzero().squeeze(-1).tolist(), key=lambda r: int(x["step"][r]))
        env, history = task.make_env(), []
        env.reset(got.examples[rows[0]].columns["seed"])
        for r in rows:
            assert texts[r] == task.context(env, history) and texts[r].endswith(TURN_SEP)
            action = got.completions[r]
            result = env.step(action)
            history.append((action, result.observation))
            assert float(x["step_reward"][r]) == result.reward and bool(x["valid"][r]) == result.info["valid"]
        assert env.done


def test_anchor_ids_match_exactly_when_the_state_text_does(policy):
    task, engine = engine_for(TEXTGRID, G=8)
    examples = task.examples("train", 2, seed=1)
    got = engine.rollout(policy, examples, [0, 1], torch.Generator().manual_seed(1))
    b, x = got.batch, got.batch.extras
    texts = policy.tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in zip(b.prompt_ids, b.prompt_mask)],
                                          skip_special_tokens=True)
    # the anchor is the current observation: the text between the last action separator and the final "|"
    states = [t[:-1].rsplit(";", 1)[-1].split(TURN_SEP)[-1] for t in texts]
    for i in range(len(states)):
        for j in range(len(states)):
            same = states[i] == states[j] and int(b.group[i]) == int(b.group[j])
            assert (int(x["anchor"][i]) == int(x["anchor"][j])) == same


def test_rollouts_are_deterministic_given_the_generator(policy):
    task, engine = engine_for(TEXTGRID, G=4)
    examples = task.examples("train", 2, seed=2)
    one, two = (engine.rollout(policy, examples, [0, 1], torch.Generator().manual_seed(3)) for _ in range(2))
    assert one.completions == two.completions
    for name in ("response_ids", "old_logp", "rewards"):
        assert torch.equal(getattr(one.batch, name), getattr(two.batch, name))
    for name, value in one.batch.extras.items():
        assert torch.equal(value, two.batch.extras[name]), name


def test_greedy_evaluation_counts_solved_episodes(policy):
    task, engine = engine_for({"name": "environment", "env": {"name": "GuessNum-v0"}}, G=1)
    examples = task.examples("test", 6, seed=0)
    rate = engine.evaluate(policy, examples)
    episodes = engine.start([e.columns["seed"] for e in examples])
    engine.play(policy, episodes, None, greedy=True)
    assert rate == sum(ep.success for ep in episodes) / 6


def test_episode_metrics_average_over_episodes_not_rows():
    extras = {"traj": torch.tensor([0, 0, 0, 1]), "correct": torch.tensor([1.0, 1.0, 1.0, 0.0]),
              "valid": torch.tensor([1.0, 0.0, 1.0, 1.0]), "tool_error": torch.tensor([0.0, 0.0, 0.0, 1.0])}
    m = episode_metrics(extras, torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert m == {"agent/success": 0.5, "agent/return": 0.5, "agent/episode_length": 2.0,
                 "agent/invalid_rate": 0.25, "agent/tool_error_rate": 0.25}


@pytest.mark.parametrize("task_config, rewards, message", [
    ({"name": "addition"}, (), "plays environment episodes; task 'addition' has none"),
    (TEXTGRID, (RewardSpec("correct"),), "remove the recipe's rewards (correct)"),
])
def test_setup_refuses_what_it_cannot_play(task_config, rewards, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine_for(task_config, reward_specs=rewards)


def test_a_context_beyond_the_model_is_refused(policy):
    task, engine = engine_for({**TEXTGRID, "history_window": 12}, G=1)
    small = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                              max_position_embeddings=24))
    with pytest.raises(ConfigError, match="exceeds the model's 24 positions"):
        engine.rollout(small, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))


def test_gigpo_recipe_trains_end_to_end(tiny, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "gigpo", *tiny, "rollout.prompts_per_step=2", "train.steps=2", "train.eval_size=8",
                 "--run-dir", str(run)]) == 0
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for key in ("agent/success", "agent/episode_length", "gigpo/anchor_singleton_frac", "eval/greedy_accuracy"):
        assert key in rows[-1], key
    assert 1 <= rows[-1]["agent/episode_length"] <= 12
