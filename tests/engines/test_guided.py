"""The ``guided`` engine: hinted re-generation for all-failed groups (RGPO, KEPO) and demonstration anchors
(DaGRPO), trained under the original prompt."""
import random

import pytest
import torch

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.guided import revealed
from polo.tasks import build_task
from polo.tasks.base import Example, reprompt
from polo.tasks.rewards import RewardSpec
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, load_policy
from tests.conftest import TINY


@pytest.fixture(scope="module")
def setup():
    recipe = load_recipe("grpo", [*TINY, "warm_start.steps=0"])  # an untrained model: every group fails
    task = build_task(recipe.task)
    policy = load_policy(recipe, task, [], log=lambda m: None)
    return recipe, task, policy


def engine(task, G=4, **settings):
    built = ENGINES.build({"name": "guided", **settings})
    built.setup(EngineSetup(task, [RewardSpec("correct", 1.0)], G, 5))
    return built


def test_hint_template_and_reveal():
    e = Example("12+34=", "46")
    assert reprompt(e, "Hint: {guide}\n{prompt}", guide=revealed("46", 0.5)).prompt == "Hint: 4\n12+34="
    assert revealed("abcde", 0.5) == "abc" and revealed("abc", 1.0) == "abc"
    chat = Example("q", "a", messages=({"role": "system", "content": "s"}, {"role": "user", "content": "q"}))
    assert reprompt(chat, "{guide}|{prompt}", guide="h").messages[-1]["content"] == "h|q"


def test_demonstration_anchor_replaces_the_lowest_row_of_failed_groups(setup):
    _, task, policy = setup
    examples = task.examples("train", 3, seed=0)
    eng = engine(task, inject="demonstration")
    got = eng.rollout(policy, examples, [0, 1, 2], torch.Generator().manual_seed(0))
    anchors = got.batch.extras["anchor"].view(3, 4)
    assert torch.equal(anchors.sum(1), torch.ones(3))  # one anchor in each (failed) group
    rows = got.batch.extras["anchor"].nonzero().squeeze(1).tolist()
    for row in rows:
        assert got.completions[row] == task.demonstration(got.examples[row])
        assert bool(got.correct[row])
    # the anchor is trained under the original prompt and its old_logp is the current policy's
    b = got.batch
    fresh = policy.forward_logp(b.prompt_ids[rows], b.prompt_mask[rows], b.response_ids[rows], b.response_mask[rows])
    torch.testing.assert_close(b.old_logp[rows], fresh["logp"])
    assert torch.equal(b.prompt_ids, policy.encode_prompts(examples)[0].repeat_interleave(4, 0))


def test_generated_hints_keep_only_better_answers_under_the_original_prompt(setup):
    _, task, policy = setup
    examples = task.examples("train", 4, seed=1)
    eng = engine(task, source="answer", template="{guide}{prompt}", levels=[1.0], samples=6)
    gen = torch.Generator().manual_seed(0)
    got = eng.rollout(policy, examples, [0, 1, 2, 3], gen)
    guided = got.batch.extras["guided"].bool()
    # an untrained model rarely answers right even with the answer in the prompt: every kept row must be correct
    # (better than the group's best unguided reward, 0) and at most `keep` = 1 per group
    assert guided.view(4, 4).sum(1).le(1).all()
    assert got.correct[guided].all()
    assert torch.equal(got.batch.group, torch.arange(4).repeat_interleave(4))


def test_kepo_acceptance_needs_every_guided_sample_correct(setup):
    _, task, policy = setup
    examples = task.examples("train", 2, seed=2)
    eng = engine(task, source="answer", levels=[1.0], samples=2, accept="all", keep=2, replace="random",
                 attempts=2)
    got = eng.rollout(policy, examples, [0, 1], torch.Generator().manual_seed(0))
    guided = got.batch.extras["guided"].view(2, 4)
    assert set(guided.sum(1).tolist()) <= {0.0, 2.0}  # E = 2 rows replaced, or none


def test_greedy_rollouts_are_never_guided(setup):
    _, task, policy = setup
    eng = engine(task, inject="demonstration")
    got = eng.rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator(), samples_per_prompt=1,
                      greedy=True)
    assert got.batch.extras["guided"].sum() == 0


def test_guided_recipe_trains(tmp_path):
    recipe = load_recipe("grpo", [*TINY, "engine.name=guided", "engine.inject=demonstration", "train.steps=2",
                                  f"output_dir={tmp_path}"])
    rows = Trainer(recipe, log=lambda m: None).run()
    assert rows[-1]["step"] == 2
    assert any("log_metric/guided/groups_triggered" in r for r in rows[1:])


def test_teacher_written_hints_reach_the_guided_prompt(setup):
    _, task, policy = setup
    examples = task.examples("train", 2, seed=3)
    eng = engine(task, source="teacher", levels=[1.0], hint_tokens=4)
    eng.settings.models["teacher"] = policy  # any Policy writes hints; here the (untrained) student itself
    assert eng.roles() == {"teacher"}
    hints = eng.guides(policy, examples)
    assert len(hints) == 2 and all(isinstance(h, str) and len(h) <= 4 for h in hints)
    got = eng.rollout(policy, examples, [0, 1], torch.Generator().manual_seed(0))
    assert got.batch.batch_size == 8 and got.batch.extras["guided"].sum() <= 2


def test_hinted_warm_start_shows_the_engines_prompt_and_needs_a_written_hint(setup):
    _, task, _ = setup
    eng = ENGINES.build({"name": "guided", "source": "rationale", "levels": [0.5, 1.0]})
    examples = task.examples("train", 400, seed=4)
    shown = eng.hinted_demonstrations(task, examples, 0.25, random.Random(0))
    hinted = [(e, s) for e, s in zip(examples, shown) if s.prompt != e.prompt]
    assert 60 <= len(hinted) <= 140  # a quarter of 400, binomial sd 8.7
    assert all(s.prompt == f"Hint: {e.answer}\n{e.prompt}" for e, s in hinted)  # the whole hint, level 1.0
    assert all(s.answer == e.answer for e, s in zip(examples, shown))
    for engine_config in ("single_turn", "{name: guided, source: teacher}", "{name: guided, inject: demonstration}"):
        with pytest.raises(ConfigError, match="warm_start.hinted=0.25"):
            load_recipe("grpo", [f"engine={engine_config}", "warm_start.hinted=0.25"])
