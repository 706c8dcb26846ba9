"""The answer_rewards input: completions split into answer sets, each answer scored by the run's rewards."""
from types import SimpleNamespace

import pytest
import torch

from polo.methods.vpo.advantage import VPO
from polo.core.batch import RolloutBatch
from polo.policy.tokenizer import build_char_tokenizer
from polo.methods.vpo.answer_sets import answer_rewards, split_answers
from polo.engines.base import ENGINES, EngineSetup, Rollouts
from polo.inputs.base import PROVIDERS, ProviderContext
from polo.tasks import build_task
from polo.tasks.base import Example
from polo.tasks.rewards import RewardSpec


def test_split_answers():
    assert split_answers("85\n 84 \n\n185\n7", "\n", 3) == ["85", "84", "185"]
    assert split_answers("1;2", ";", 5) == ["1", "2"]
    assert split_answers("  \n ", "\n", 3) == []
    # with the task's answer marker every answer keeps the shared reasoning before it
    assert split_answers("think 2+2 #### 4 | 5", " | ", 3, "####") == ["think 2+2 ####4", "think 2+2 ####5"]
    assert split_answers("no marker | here", " | ", 3, "####") == ["no marker", "here"]


def odd_only(completions, **kwargs):
    """A reward that scores only odd-length answers (None otherwise)."""
    return [1.0 if len(c) % 2 else None for c in completions]


def context(completions, components, rewards=("correct", "digit_match")):
    task = build_task("addition")
    engine = ENGINES.build("single_turn")
    engine.setup(EngineSetup(task, [RewardSpec.of(r) for r in rewards], len(completions), 8))
    B = len(completions)
    ids = torch.zeros(B, 2, dtype=torch.long)
    batch = RolloutBatch(prompt_ids=ids, prompt_mask=torch.ones_like(ids), response_ids=ids,
                         response_mask=torch.ones_like(ids), group=torch.zeros(B, dtype=torch.long),
                         rewards=torch.zeros(B, len(rewards)))
    rollouts = Rollouts(batch, list(completions), [Example("40+45=", "85")] * B)
    policy = SimpleNamespace(tokenizer=build_char_tokenizer())
    return ProviderContext(policy, {}, engine, task, components, {"answer_rewards"}), rollouts


def test_every_answer_is_scored_by_every_reward():
    ctx, rollouts = context(["85\n84\n185\n85", "", "75"], {"advantage": VPO(answers=3)})
    got = answer_rewards(ctx, rollouts)["answer_rewards"]
    assert got.shape == (3, 3, 2) and got.dtype == torch.float32
    torch.testing.assert_close(got[0], torch.tensor([[1.0, 1.0], [0.0, 0.5], [0.0, 2 / 3]]))
    assert got[1].isnan().all()  # no answer parsed: three missing rows
    torch.testing.assert_close(got[2, 0], torch.tensor([0.0, 0.5]))
    assert got[2, 1:].isnan().all()
    assert PROVIDERS.get("answer_rewards").fn is answer_rewards


def test_a_reward_returning_none_is_nan_and_vpo_reads_the_input():
    ctx, rollouts = context(["85\n7", "123\n45"], {"advantage": VPO(answers=2)}, rewards=("correct", odd_only))
    got = answer_rewards(ctx, rollouts)["answer_rewards"]
    assert got[:, :, 1].isnan().tolist() == [[True, False], [False, True]]
    rollouts.batch.extras["answer_rewards"] = got.double()
    assert torch.isfinite(VPO(answers=2)(rollouts.batch).advantages).all()


def test_the_components_must_name_the_answer_format():
    ctx, rollouts = context(["85"], {})
    with pytest.raises(ValueError, match="no component sets 'answers'"):
        answer_rewards(ctx, rollouts)
    ctx, rollouts = context(["85"], {"advantage": VPO(), "other": VPO(separator=";")})
    with pytest.raises(ValueError, match="different separator values"):
        answer_rewards(ctx, rollouts)
