"""The ``inspo`` engine: instructions in the prompt and in every row, attribution, the evolution round (prune,
propose, verify, admit), both proposers (the mutator; a causal LM behind a local fake endpoint or from a local
checkpoint), config errors, and a killed run that resumes bit for bit."""

import pytest
import torch

from polo.core.registry import ConfigError
from polo.policy.policy import build_tiny_policy
from polo.engines.base import ENGINES, EngineSetup
from polo.methods.inspo.proposers import ModelProposer, blame, clean, failures_first, mutate
from polo.tasks import build_task
from polo.tasks.instructed import instructed
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume
from tests.core.stub_endpoint import stub_endpoint

QUIET = dict(log=lambda *_: None)


def trainer(tiny, tmp_path, *overrides, name="run"):
    return Trainer(load_recipe("inspo", [*tiny, *overrides]), tmp_path / name, **QUIET)


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def test_instructed_context_and_warm_start_follow_the_grammar():
    task = build_task({"name": "instructed_environment", "env": {"name": "KBLookup-v0"}, "warm_epsilon": 0.3})
    assert instructed("check hop", "q: city of temi?|") == "check hop|q: city of temi?|"
    assert instructed("", "q|") == "q|"
    assert task.compose(["hop", "check", "guess"]) == "check hop guess"  # the grammar's order
    assert task.epsilon("check hop read") == 0.0 and task.epsilon("guess skip") == pytest.approx(0.85)
    assert task.epsilon("fast guess skip any") == 1.0
    words = set(task.words)
    for example in task.warm_start_examples(60, seed=0):
        instruction = example.prompt.split("|")[0]
        assert 2 <= len(instruction.split()) <= 3 and set(instruction.split()) <= words
        assert example.prompt.split("|")[1].startswith("q: ")
    with pytest.raises(Exception, match="fragments must be distinct non-empty lowercase words"):
        build_task({"name": "instructed_environment", "fragments": [["Bad Word", 0.1]]})
    with pytest.raises(Exception, match="sizes must be"):
        build_task({"name": "instructed_environment", "sizes": [3, 2]})


def test_rows_carry_their_groups_instruction(tiny, tmp_path):
    tr = trainer(tiny, tmp_path)
    engine, examples = tr.engine, tr.stream.pool[:4]
    got = engine.rollout(tr.policy, examples, [0, 1, 2, 3], torch.Generator().manual_seed(0))
    batch, texts = got.batch, engine.population_texts
    ids = batch.extras["instruction"]
    assert ids.shape == batch.group.shape
    for row, record in enumerate(got.turns):
        text = texts[engine._ids.index(int(ids[row]))]
        assert record.meta["instruction"] == int(ids[row])
        assert record.context_text.startswith(text + "|q: ")
    for g in batch.group.unique():  # one instruction per question
        assert ids[batch.group == g].unique().numel() == 1
    # attribution: the first attribution of each used instruction sets its score to its episodes' mean return
    returns = {}
    for r in got.turns:
        returns.setdefault(r.traj, [r.meta["instruction"], 0.0])[1] += r.reward
    row = engine.after_update(batch, None)
    for sid in {i for i, _ in returns.values()}:
        mean = [ret for i, ret in returns.values() if i == sid]
        assert engine._scores[engine._ids.index(sid)] == pytest.approx(sum(mean) / len(mean))
        assert engine._counts[engine._ids.index(sid)] == len(mean)
    assert row["inspo/size"] == 8 and len(engine._replay) == 4 * 8


def test_mix_within_group_samples_per_episode(tiny, tmp_path):
    tr = trainer(tiny, tmp_path, "engine.mix_within_group=true")
    settings = tr.engine.assign(4, 8, torch.Generator().manual_seed(0))
    assert len(settings) == 32 and any(len(set(settings[i:i + 8])) > 1 for i in range(0, 32, 8))


def test_mutator_swaps_the_most_blamed_fragment():
    words = ["check", "hop", "read", "fast", "guess"]
    replay = ([{"instruction": "check fast", "reward": 0.0}] * 6 + [{"instruction": "check read", "reward": 1.0}] * 4
              + [{"instruction": "guess hop", "reward": 0.0}] * 2)
    rate = blame(replay, words)
    assert rate["fast"] > rate["check"] > rate["read"]
    got = mutate(["check fast", "guess hop"], [0.6, 0.1], replay, words, 2, torch.Generator().manual_seed(0))
    assert got[0] == "check read"  # best parent, "fast" (most blamed) swapped for "read" (least blamed)
    assert len(got) == 2 and len(set(got)) == 2 and not set(got) & {"check fast", "guess hop"}
    assert got == mutate(["check fast", "guess hop"], [0.6, 0.1], replay, words, 2, torch.Generator().manual_seed(0))
    assert [e["reward"] for e in failures_first(replay)][:8] == [0.0] * 8
    assert clean("  Check!! the HOP-twice ", 24) == "check the hop twice"


def test_evolution_round_prunes_proposes_and_admits(tiny, tmp_path):
    overrides = ["engine.prune_every=1", "engine.n_min=0", "engine.verify=4", "train.eval_every=100"]
    rows = trainer(tiny, tmp_path, *overrides).run()
    assert rows[1]["inspo/pruned"] == 0.0  # the first round comes before the second rollout
    second = rows[2]
    assert second["inspo/pruned"] == 2 and second["inspo/proposed"] == 2
    assert second["inspo/size"] == 6 + second["inspo/admitted"]


OPTIMIZER_PROMPTS: list[str] = []
"""The prompts the stub optimizer received."""


@pytest.fixture
def fake_endpoint():
    """An OpenAI-compatible /v1/completions that answers every prompt with one instruction."""
    with stub_endpoint(lambda prompt: " Read the friend, then ANSWER.", OPTIMIZER_PROMPTS) as url:
        yield url


def test_model_proposer_through_an_endpoint(tiny, tmp_path, fake_endpoint):
    overrides = ["engine.prune_every=1", "engine.n_min=0", "engine.verify=2", "engine.proposer=model",
                 f"engine.proposer_url={fake_endpoint}", "engine.proposer_model=opt", "train.steps=2",
                 "train.eval_every=100"]
    tr = trainer(tiny, tmp_path, *overrides)
    rows = tr.run()
    assert "read the friend then ans" in tr.engine.population_texts  # cleaned, cut at 24 characters
    assert rows[2]["inspo/proposed"] == 1  # the second identical reply is a repeat, not a candidate
    assert any(p.startswith("failed with '") or "best so far:" in p for p in OPTIMIZER_PROMPTS)


def test_model_proposer_from_a_local_checkpoint(tmp_path):
    torch.manual_seed(0)
    build_tiny_policy().save(tmp_path / "opt")
    from polo.policy.policy import Policy
    proposer = ModelProposer(12, policy=Policy.load(tmp_path / "opt"))
    replay = [{"instruction": "check", "transcript": "q: city of temi?|a:rim;done", "reward": 0.0}]
    got = proposer(["check"], [0.0], replay, 3, torch.Generator().manual_seed(0))
    assert len(got) + proposer.failures == 3
    assert all(len(t) <= 12 and t == clean(t, 12) and t != "check" for t in got)


@pytest.mark.parametrize("engine, message", [
    ({"name": "inspo", "population": 3, "min_population": 4}, "min_population=4 exceeds population=3"),
    ({"name": "inspo", "proposer": "model"}, "exactly one of proposer_path"),
    ({"name": "inspo", "instructions": ["a", "a"]}, "instructions repeat"),
    ({"name": "inspo", "proposer": "model", "proposer_url": "http://x/v1"}, "needs proposer_model"),
])
def test_bad_settings_name_the_value(engine, message):
    with pytest.raises(Exception, match=message):
        ENGINES.build(engine)


def test_a_task_without_grammar_is_refused():
    setup = EngineSetup(build_task({"name": "environment", "env": {"name": "KBLookup-v0"}}), [], 8, 27)
    with pytest.raises(ConfigError, match="set engine.fragments or use task instructed_environment"):
        ENGINES.build({"name": "inspo"}).setup(setup)
    with pytest.raises(ConfigError, match="set engine.instructions"):
        ENGINES.build({"name": "inspo", "fragments": ["check"]}).setup(setup)
    engine = ENGINES.build({"name": "inspo", "fragments": ["check", "hop"], "instructions": ["check", "hop"]})
    engine.setup(setup)
    assert engine.population_texts == engine.initial_population == ["check", "hop"]


def test_killed_run_resumes_bit_for_bit(tiny, tmp_path):
    overrides = ["engine.prune_every=2", "engine.n_min=0", "engine.verify=2", "train.save_every=1",
                 "rollout.prompts_per_step=2", "train.eval_size=8", "train.eval_every=2", "optim.schedule=constant",
                 "train.steps=4"]
    whole = trainer(tiny, tmp_path, *overrides, name="whole")
    full = whole.run()
    trainer(tiny, tmp_path, *overrides[:-1], "train.steps=2", name="cut").run()
    resumed = resume(tmp_path / "cut", overrides=["train.steps=4"], **QUIET)
    rest = resumed.run()
    assert [r["step"] for r in rest] == [0, 1, 2, 3, 4]
    assert any(r.get("inspo/proposed") for r in full[3:])  # a round ran after the resume point
    assert deterministic(full) == deterministic(rest)
    assert resumed.engine.state_dict() == whole.engine.state_dict()
