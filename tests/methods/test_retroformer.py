"""Retroformer: the reflection reward, the reflection task's contexts and warm start, the retroformer engine's
rows (one per reflection, reward = the next trial's improvement, groups = task × trial) and a resumed run."""
import math
import re

import pytest
import torch

from polo.methods.retroformer.reward import reflection_rewards
from polo.core.registry import ConfigError
from polo.envs import make
from polo.policy.reference import frozen_copy
from polo.roles.base import ROLES
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.base import ENGINES, EngineSetup
from polo.methods.retroformer.engine import Retroformer
from polo.tasks import build_task
from polo.methods.retroformer.task import failure_cause, reflection_text
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume

TASK = {"name": "reflection", "env": {"name": "TextGrid-v0", "obs_mode": "global"}}
ALPHABET = re.compile(r"^[a-z0-9 :;,.?=<>#/@|-]*$")
"""The environments' 50 characters (spec §23.1): everything the actor and the retrospective model read or write."""


def test_the_worked_example():
    """Spec §21 (d): G_k = 0.2, G_{k+1} = 0.7 → r = 0.5."""
    r = reflection_rewards(torch.tensor([0.2]), torch.tensor([0.7]))
    assert r.item() == pytest.approx(0.5, abs=1e-4)


def test_rewards_are_elementwise_and_refuse_bad_returns():
    before, after = torch.tensor([0.0, 1.0, 0.0, 0.5]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    assert reflection_rewards(before, after).tolist() == [1.0, 0.0, 0.0, -0.5]
    assert reflection_rewards(torch.zeros(1), torch.ones(1)).tolist() == [1.0]  # a single reflection
    with pytest.raises(ValueError, match="same shape"):
        reflection_rewards(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        reflection_rewards(torch.tensor([0.0, float("nan")]), torch.zeros(2))


def test_contexts_plans_and_causes():
    task = build_task(TASK)
    env = make(task.env)
    env.reset(0)  # spec golden: r0c2 → r3c2, no walls
    history = [("s", env.step("s").observation), ("n", env.step("n").observation)]
    memory = [reflection_text("loop", p) for p in ("e", "ww", "nn", "sss")]
    context = task.actor_context(env, history, memory)
    assert context == "m:loop plan:ww/loop plan:nn/loop plan:sss|r0c2 g:r3c2|s;r1c2 g:r3c2|n;r0c2 g:r3c2|"
    assert task.actor_context(env, history, []) == task.context(env, history)  # no memory: the plain context
    assert task.retro_context(env, history, 0.0) == "r0c2 g:r3c2|s;r1c2 g:r3c2|n;r0c2 g:r3c2|ret:0|"
    assert task.plan("loop plan:ssee") == ["s", "s", "e", "e"]
    assert task.plan("bump plan:sssssss") == ["s"] * task.plan_len
    assert task.plan("no plan here") == [] and task.plan("") == []
    ok = {"valid": True, "bump": False}
    assert failure_cause([("b", {**ok, "anchor_obs": "a"}), ("c", {**ok, "anchor_obs": "b", "valid": False})]) == "bad"
    assert failure_cause([("a", {**ok, "anchor_obs": "a", "bump": True})]) == "bump"
    assert failure_cause([("b", {**ok, "anchor_obs": "a"}), ("a", {**ok, "anchor_obs": "b"})]) == "loop"
    assert failure_cause([("b", {**ok, "anchor_obs": "a"}), ("c", {**ok, "anchor_obs": "b"})]) == "slow"


def test_warm_start_mixes_actor_steps_and_reflections_in_the_alphabet():
    task = build_task(TASK)
    examples = task.warm_start_examples(400, seed=0)
    assert examples == task.warm_start_examples(400, seed=0)  # deterministic
    reflections = [e for e in examples if "ret:" in e.prompt]
    with_memory = [e for e in examples if e.prompt.startswith("m:")]
    plain = [e for e in examples if e not in reflections and e not in with_memory]
    assert reflections and with_memory and plain
    for e in reflections:  # a failed trial → a cause and a plan
        assert re.fullmatch(r"(bad|bump|loop|slow) plan:[nsew]{1,4}", e.answer), e.answer
        assert e.prompt.endswith("|ret:0|")
    for e in with_memory + plain:
        assert e.answer in "nsew" and len(e.answer) == 1
    for e in examples:
        assert ALPHABET.match(e.prompt) and ALPHABET.match(e.answer)
        assert len(e.prompt) + task.max_completion_chars + 2 <= 256  # within the recipe's positions


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=256))


def engine_for(policy, G=4, **settings):
    task = build_task(TASK)
    engine = ENGINES.build({"name": "retroformer", **settings}, "engine")
    engine.setup(EngineSetup(task, [], G, task.max_completion_chars + 1, models={"frozen_actor": frozen_copy(policy)}))
    return task, engine


def test_rows_are_reflections_rewarded_by_the_next_trial(policy, monkeypatch):
    task, engine = engine_for(policy, G=4, trials=3, first_attempts=2)
    played, play = [], Retroformer.play

    def recording_play(self, actor, episodes, *args, **kwargs):
        played.append(episodes)
        return play(self, actor, episodes, *args, **kwargs)

    monkeypatch.setattr(Retroformer, "play", recording_play)
    examples = task.examples("train", 3, seed=0)
    got = engine.rollout(policy, examples, [7, 8, 9], torch.Generator().manual_seed(0))
    b, x = got.batch, got.batch.extras
    first, trial2 = played[0], played[1]
    assert len(first) == 3 * 2 and not any(ep.success for ep in first)  # an untrained actor fails every attempt
    assert len(trial2) == 3 * 4  # G reflections per task
    n2 = 3 * 4
    assert x["trial"][:n2].tolist() == [1] * n2 and set(x["trial"][n2:].tolist()) <= {2}
    assert b.group[:n2].tolist() == [t // 4 for t in range(n2)]  # group = (task, trial index)
    assert len(set(zip(x["prompt_index"].tolist(), x["trial"].tolist()))) == int(b.group.max()) + 1
    assert x["prompt_index"][:n2].tolist() == [7] * 4 + [8] * 4 + [9] * 4
    # failed trials have return 0: the improvement r = G_{k+1} − G_k is the next trial's success
    assert torch.equal(b.rewards[:, 0], x["correct"])
    # the rows' prompts are the failed trials as the retrospective model reads them, the responses its reflections
    texts = policy.tokenizer.batch_decode([ids[m.bool()].tolist() for ids, m in zip(b.prompt_ids, b.prompt_mask)],
                                          skip_special_tokens=True)
    for row, ep in zip(range(n2), [first[2 * (t // 4)] for t in range(n2)]):
        assert texts[row] == task.retro_context(ep.env, ep.history, 0.0)
    assert (b.old_logp[b.response_mask.bool()] <= 0).all() and (b.old_logp[~b.response_mask.bool()] == 0).all()
    # the second trial reads its reflection: its first context is the memory, then the episode
    for i, ep in enumerate(trial2):
        reflection = got.completions[i]
        assert ep.records[0].context == task.actor_context(ep.env, [], [reflection])
        assert ep.records[0].context.startswith(f"m:{reflection}|")
    if len(played) > 2:  # trial 3: the memory holds both reflections of the branch, newest last
        assert played[2][0].records[0].context.startswith("m:") and played[2][0].records[0].context.count("/") >= 1


def test_evaluate_counts_tasks_solved_within_the_trials(policy):
    task, engine = engine_for(policy)
    examples = task.examples("test", 4, seed=0)
    value = engine.evaluate(policy, examples)
    metrics = engine.evaluation_metrics()
    assert value == metrics["retroformer/within_trials"] >= metrics["retroformer/first_trial"]
    assert value == engine.evaluate(policy, examples)  # greedy: deterministic


def test_bad_configurations_are_refused(policy):
    engine = ENGINES.build({"name": "retroformer"}, "engine")
    with pytest.raises(ConfigError, match="reflection task"):
        engine.setup(EngineSetup(build_task({"name": "environment"}), [], 4, 13))
    with pytest.raises(ValueError, match="trials"):
        ENGINES.build({"name": "retroformer", "trials": 1}, "engine")
    with pytest.raises(ValueError, match="no rollout trees"):
        ENGINES.build({"name": "retroformer", "tree": {"name": "reflectpo"}}, "engine")
    with pytest.raises(ValueError, match="source 'path' needs"):
        ROLES.build({"name": "frozen_actor", "source": "path"}, "roles.frozen_actor")
    with pytest.raises(ValueError, match="plan_len"):
        build_task({**TASK, "plan_len": 0})


def _deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_a_resumed_run_equals_an_unbroken_one(tiny, tmp_path):
    every = ["train.save_every=2", "train.eval_every=2", "rollout.samples_per_prompt=4"]
    full = Trainer(load_recipe("retroformer", [*tiny, *every, "train.steps=4"]), tmp_path / "full",
                   log=lambda *_: None).run()
    assert [r["step"] for r in full] == [0, 1, 2, 3, 4]
    assert all(math.isfinite(r["log_metric/retroformer/improvement"]) for r in full[1:])
    assert full[-1]["eval/retroformer/within_trials"] == full[-1]["eval/greedy_accuracy"]
    Trainer(load_recipe("retroformer", [*tiny, *every, "train.steps=2"]), tmp_path / "cut", log=lambda *_: None).run()
    resumed = resume(tmp_path / "cut", log=lambda *_: None, overrides=["train.steps=4"])
    resumed.run()
    assert _deterministic(full) == _deterministic(resumed.metrics.read())
