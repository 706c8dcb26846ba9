"""The preference_pairs engine (rows, groups, old_logp, scores), the chosen provider (online pairs, ties), the
history_logp provider and the pair builder."""
from pathlib import Path

import pytest
import torch

from polo.core.batch import RolloutBatch
from polo.core.registry import ConfigError
from polo.roles.history import PolicyHistory
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.base import ENGINES, EngineSetup, Rollouts
from polo.engines.pair_builder import build_pairs
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks import Example, Task, build_task
from polo.tasks.rewards import RewardSpec

PAIRS = Path(__file__).parent.parent / "tasks" / "data" / "addition_pairs.jsonl"


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64))


@pytest.fixture(scope="module")
def task():
    return build_task({"name": "preference_pairs", "path": str(PAIRS), "verifier": "addition"})


def pairs_engine(task):
    engine = ENGINES.build("preference_pairs")
    engine.setup(EngineSetup(task, [RewardSpec("correct", 1.0)], 2, 4))
    return engine


def test_engine_rows_groups_old_logp_and_scores(policy, task):
    examples = task.examples("train", 3, seed=0)
    got = pairs_engine(task).rollout(policy, examples, [5, 6, 7], torch.Generator())
    batch = got.batch
    assert batch.group.tolist() == [0, 0, 1, 1, 2, 2]
    assert batch.extras["chosen"].tolist() == [1.0, 0.0] * 3
    assert batch.extras["prompt_index"].tolist() == [5, 5, 6, 6, 7, 7]
    texts = [e.columns[side] for e in examples for side in ("chosen", "rejected")]
    assert got.completions == texts
    ends = batch.response_ids.gather(1, (batch.lengths - 1)[:, None]).squeeze(1)
    assert (ends == policy.eos_token_id).all()  # each response ends as a finished completion
    with torch.no_grad():
        again = policy.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    torch.testing.assert_close(batch.old_logp, again["logp"], atol=1e-5, rtol=0)
    assert batch.rewards[:, 0].tolist() == [1.0, 0.0] * 3  # the chosen answers are the correct ones
    assert got.correct.tolist() == [True, False] * 3


def test_engine_refuses_sampling_and_plain_examples(policy, task):
    engine = pairs_engine(task)
    examples = task.examples("train", 2, seed=0)
    with pytest.raises(ConfigError, match="cannot give samples_per_prompt=1"):
        engine.rollout(policy, examples, [0, 1], torch.Generator(), samples_per_prompt=1, greedy=True)
    with pytest.raises(ConfigError, match="'chosen' and 'rejected' columns"):
        engine.rollout(policy, [Example("1+1=", "2")], [0], torch.Generator())
    assert "chosen" in engine.provides and engine.group_size == 2


def scored_batch(rewards, group):
    B = len(rewards)
    ones, zeros = torch.ones(B, 1, dtype=torch.long), torch.zeros(B, 1, dtype=torch.long)
    batch = RolloutBatch(prompt_ids=zeros, prompt_mask=ones, response_ids=zeros, response_mask=ones,
                         group=torch.tensor(group), rewards=torch.tensor(rewards))
    return Rollouts(batch, [""] * B, [Example("p", "a")] * B)


def test_chosen_provider_labels_online_pairs_and_skips_ties():
    provider = PROVIDERS.get("chosen")
    assert PROVIDERS.get("pair_valid") is provider
    got = provider(None, scored_batch([1.0, 0.0, 0.5, 0.5, 0.0, 1.5, float("nan"), 1.0], [0, 0, 1, 1, 2, 2, 3, 3]))
    assert got["chosen"].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    assert got["pair_valid"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ConfigError, match="samples_per_prompt: 2"):
        provider(None, scored_batch([1.0, 0.0, 0.5], [0, 0, 0]))


def test_history_logp_gives_each_snapshots_log_likelihood(policy, task):
    history = PolicyHistory(policy, 2)
    with torch.no_grad():
        next(history.snapshots[1].parameters()).mul_(0.5)  # an older iterate that differs
    rollouts = pairs_engine(task).rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator())
    ctx = ProviderContext(policy, {"history": history}, None, task, {}, {"history_logp"})
    got = PROVIDERS.get("history_logp")(ctx, rollouts)["history_logp"]
    b = rollouts.batch
    assert got.shape == (4, 2)
    for k, model in enumerate(history.snapshots):
        with torch.no_grad():
            expected = model.forward_logp(b.prompt_ids, b.prompt_mask, b.response_ids, b.response_mask)["logp"].sum(-1)
        torch.testing.assert_close(got[:, k], expected)
    torch.testing.assert_close(got[:, 0], b.old_logp.sum(-1), atol=1e-5, rtol=0)  # slot 0 = the policy here
    assert not torch.allclose(got[:, 0], got[:, 1])
    assert PROVIDERS.get("history_logp").roles == {"history"}


class ParityTask(Task):
    """Correct iff the completion has an even number of characters (any untrained policy gets both)."""

    max_completion_chars: int = 3

    def is_correct(self, completion: str, example: Example) -> bool:
        return len(completion) % 2 == 0


def test_pair_builder_pairs_a_correct_with_an_incorrect_sample(policy):
    examples = [Example("12+3=", "15", {"level": 1}), Example("7+7=", "14", {"level": 2}),
                Example("12+3=", "15", {"level": 1})]
    rows = build_pairs(policy, ParityTask(), examples, 6, 3, torch.Generator().manual_seed(0))
    assert 1 <= len(rows) <= 2 and len({r["prompt"] for r in rows}) == len(rows)  # distinct prompts only
    for row in rows:
        assert len(row["chosen"]) % 2 == 0 and len(row["rejected"]) % 2 == 1
        assert row["answer"] == {"12+3=": "15", "7+7=": "14"}[row["prompt"]] and "level" in row
    again = build_pairs(policy, ParityTask(), examples, 6, 3, torch.Generator().manual_seed(0))
    assert again == rows
    with pytest.raises(ValueError, match="at least 2 samples"):
        build_pairs(policy, ParityTask(), examples, 1, 3, torch.Generator())


def test_polo_pairs_refuses_bad_counts(tmp_path, capsys):
    from polo.cli import main

    assert main(["pairs", "addition", "--out", str(tmp_path / "p.jsonl"), "--samples", "1"]) == 2
    assert "--samples at least 2" in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "p.jsonl").exists()
