"""The ``self_hpo`` engine: the harness shapes the context and the turn limit, every row carries its harness
id, the hard set and the H-step's keep-unless-strictly-better rule, config errors, and resume bit for bit."""
import pytest
import torch

from polo.core.registry import ConfigError
from polo.engines import self_hpo
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.self_hpo import harness_text
from polo.tasks import build_task
from polo.train.config import load_recipe
from polo.train.trainer import Trainer, resume

QUIET = dict(log=lambda *_: None)
SMALL = ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "train.eval_size=8",
         "engine.hard_cap=2", "engine.eval_episodes=1", "engine.proposals=2"]


def deterministic(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "elapsed"))} for r in rows]


def engine_on(task_config, **settings):
    engine = ENGINES.build({"name": "self_hpo", **settings})
    engine.setup(EngineSetup(build_task(task_config), [], 4, 17))
    return engine


def test_the_harness_shapes_context_and_turn_limit():
    engine = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}},
                       harness={"template": "tools", "window": 1, "tools": ["edit", "t", "s"], "max_turns": 3})
    harness = engine.current_harness
    assert harness == {"template": "tools", "window": 1, "tools": ["edit", "t", "s"], "max_turns": 3}
    env = engine.make_env(harness)
    assert env.turn_limit == 3
    engine._pending = [harness]
    episode = engine.start([0])[0]
    episode.apply("t")
    episode.apply("t")
    context = engine.context(episode, chat=False)
    assert context.startswith("t:edit,t,s|") and context.count(";") == 1  # one past turn shown
    plain = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}})
    assert plain.current_harness["window"] == 4 and plain.current_harness["max_turns"] == 4


def test_neighbours_are_single_field_changes():
    engine = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}}, windows=[3, 4], turn_limits=[4, 5])
    got = engine.neighbours()
    assert {"window": 3} in [{k: v for k, v in n.items() if v != engine.current_harness[k]} for n in got]
    changed = [sum(n[k] != engine.current_harness[k] for k in n) for n in got]
    assert changed == [1] * len(got) and len(got) == 3  # window 3, template tools, max_turns 5


def test_errors_name_the_setting():
    with pytest.raises(ConfigError, match="max_turns knob"):
        engine_on({"name": "environment", "env": {"name": "TextGrid-v0"}}, turn_limits=[3])
    with pytest.raises(ConfigError, match="windows is empty"):
        engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}}, windows=[])
    with pytest.raises(Exception, match="template"):
        ENGINES.build({"name": "self_hpo", "harness": {"template": "fancy"}})


def test_h_step_keeps_the_harness_unless_strictly_better(monkeypatch):
    engine = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}})
    engine._success = {11: 0.0, 12: 1.0, 13: 0.25}
    seen = {}

    def scores(self, policy, settings, seeds, G, generator, success):
        assert success
        seen["seeds"] = seeds
        return torch.tensor([[0.5], [0.5], [0.25], [0.5], [0.5]])[: len(settings)]

    monkeypatch.setattr(type(engine), "play_settings", scores)
    before = engine.current_harness
    row = engine.h_step(None, torch.Generator().manual_seed(0))
    assert seen["seeds"] == [11, 13]  # success ≤ τ_hard, the hardest first
    assert row["self_hpo/switched"] == 0.0 and engine.current_harness == before
    engine._success = {11: 0.0}
    better = torch.tensor([[0.25], [0.75], [0.5], [0.0], [0.1]])
    monkeypatch.setattr(type(engine), "play_settings", lambda self, p, settings, *a, **k: better[: len(settings)])
    row = engine.h_step(None, torch.Generator().manual_seed(0))
    assert row["self_hpo/switched"] == 1.0 and engine.current_harness != before
    assert engine.setting_id(engine.current_harness) == 1


def test_rows_carry_the_harness_and_resume_bit_for_bit(tiny, tmp_path):
    overrides = [*tiny, *SMALL, "engine.round_steps=2", "train.save_every=1", "train.eval_every=2",
                 "optim.schedule=constant"]
    whole = Trainer(load_recipe("self_hpo", [*overrides, "train.steps=4"]), tmp_path / "whole", **QUIET)
    full = whole.run()
    got = whole.last_rollouts
    assert (got.batch.extras["harness_id"] == int(full[-1]["self_hpo/harness_id"])).all()
    assert all(r.meta["harness_id"] == int(full[-1]["self_hpo/harness_id"]) for r in got.turns)
    assert "self_hpo/kept_score" in full[3]  # the round-2 H-step ran before step 3's rollout
    Trainer(load_recipe("self_hpo", [*overrides, "train.steps=2"]), tmp_path / "cut", **QUIET).run()
    resumed = resume(tmp_path / "cut", overrides=["train.steps=4"], **QUIET)
    assert deterministic(resumed.run()) == deterministic(full)
    assert resumed.engine.state_dict() == whole.engine.state_dict()


def test_an_edit_is_parsed_against_the_harness_space():
    engine = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}}, windows=[1, 2, 3, 4],
                       turn_limits=[3, 4], harness={"tools": ["edit", "t", "s"]})
    h = engine.current_harness
    assert engine.parse_edit("window=3") == {**h, "window": 3}
    assert engine.parse_edit("template=tools") == {**h, "template": "tools"}
    assert engine.parse_edit("tools=edit,t") == {**h, "tools": ["edit", "t"]}
    assert engine.parse_edit("max_turns=3") == {**h, "max_turns": 3}
    for bad in ("window=9", "window=x", "template=fancy", "tools=edit,run", "tools=t,t", "tools=", "max_turns=5",
                "1+b", "window=3 template=tools", "turns=3"):
        assert engine.parse_edit(bad) is None, bad
    assert "window=4" in harness_text(h) and harness_text(h).startswith("template=plain ")


def test_the_policys_edits_are_validated_and_invalid_ones_replaced(monkeypatch):
    engine = engine_on({"name": "environment", "env": {"name": "CodeFix-v0"}}, proposer="policy", proposals=4,
                       turn_limits=[3, 4], harness={"tools": ["edit", "t", "s"]})
    engine._success, engine._failures = {11: 0.0, 12: 1.0}, {11: "fix|1+b;ok|s;2/9 pass"}
    asked, played = [], {}

    def write(policy, prompts, max_tokens, generator):
        asked.extend(prompts)
        return ["window=2;s", "1+b", "window=2", "template=tools|x"]  # one duplicate, one not an edit

    def scores(self, policy, settings, seeds, G, generator, success):
        played["settings"] = settings
        return torch.tensor([[0.25], [0.5], [0.0], [0.0], [0.0]])  # the first written edit is strictly better

    monkeypatch.setattr(self_hpo, "sample_replies", write)
    monkeypatch.setattr(type(engine), "play_settings", scores)
    start, around = engine.current_harness, engine.neighbours()
    row = engine.h_step(None, torch.Generator().manual_seed(0))
    assert asked == [f"fail: fix|1+b;ok|s;2/9 pass\nharness: {harness_text(start)}\nedit:"] * 4
    current, *candidates = played["settings"]
    assert current == start and candidates[:2] == [{**start, "window": 2}, {**start, "template": "tools"}]
    assert len(candidates) == 4 and all(c in around for c in candidates[2:])  # the mutator's fill
    assert len({str(c) for c in candidates}) == 4
    assert row["self_hpo/proposals_valid"] == 2 and row["self_hpo/proposals_invalid"] == 2
    assert row["self_hpo/switched_to_written"] == 1 and engine.current_harness == {**start, "window": 2}
    assert engine._failures == {}  # the next round reads its own failures


def test_the_policy_proposes_in_a_run(tiny, tmp_path):
    recipe = load_recipe("self_hpo", [*tiny, *SMALL, "engine.round_steps=1", "engine.proposer=policy",
                                      "train.steps=2"])
    rows = Trainer(recipe, tmp_path / "run", **QUIET).run()
    assert rows[2]["self_hpo/proposals_valid"] + rows[2]["self_hpo/proposals_invalid"] == 2
    with pytest.raises(ConfigError, match="'mutator' or 'policy'") as err:
        load_recipe("self_hpo", ["engine.proposer=llm"])
    assert "\n" not in str(err.value)
