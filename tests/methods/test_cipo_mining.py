"""CIPO's skill mining in its brancher: the tool sequences it mines (composites expanded, invalid actions and failed
episodes left out), which swaps it offers, and the cipo recipe's brancher mining and replaying in a rollout (a
scripted solver as the sampler) with the advantage logging what it mined."""
from types import SimpleNamespace

import pytest
import torch

from polo.core.registry import ConfigError
from polo.engines.base import EngineSetup
from polo.engines.branches import BRANCHERS
from polo.engines.episodes import TurnRecord
from polo.engines.multi_turn import MultiTurn
from polo.engines.sampler import SampleOutput
from polo.methods.cipo.advantage import CIPO
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task
from polo.train.config import load_recipe


def episode(actions, success=True, invalid=()):
    records = [TurnRecord(0, t, "", a, "", 0.0, {"valid": t not in invalid}, 0, "", None, None)
               for t, a in enumerate(actions)]
    return SimpleNamespace(records=records, success=success)


def brancher(**settings):
    return BRANCHERS.build({"name": "cipo", **settings}, "engine.tree")


def test_mining_reads_the_successful_episodes_atomic_tools():
    cipo = brancher()
    assert cipo.tools(["s2:kazo", "a:cat", "x"]) == ["s", "s", "a", "x"]
    two_hop = [episode(["s2:kazo", "a:cat"]), episode(["s:kazo", "s:pepe", "a:cat"]),
               episode(["s:kazo", "zz", "s:pepe", "a:cat"], invalid={1})]
    assert cipo.mine(two_hop + [episode(["s:temi", "s:temi", "s:temi"], success=False)]) == {"s2"}
    assert cipo.mined == [("s", "s", "a"), ("s", "a"), ("s", "s")]  # 3 × (s, s, a): 6 calls saved; ties by name
    # one-hop successes only: no two searches in a row, so s2 is not offered
    assert cipo.mine([episode(["s:kazo", "a:cat"])] * 3) == set() and cipo.mined == [("s", "a")]
    assert brancher(k=1).mine(two_hop) == set()  # the budget keeps (s, s, a) alone
    assert cipo.mine([]) == set() and cipo.mined == []


def test_only_a_mined_composite_is_swapped_for_its_first_tool():
    cipo = brancher()
    assert cipo.offered("s:kazo", "s2:kazo", {"s2"}) and cipo.offered("s2:kazo", "s:kazo", {"s2"})
    assert not cipo.offered("s:kazo", "s2:kazo", set())
    chained = brancher(composites={"s2": ["s", "s"], "sa": ["a", "s"]})
    assert not chained.offered("s:kazo", "sa:kazo", {"sa"})  # sa starts with a, not s


def test_bad_composites_are_refused():
    with pytest.raises(ConfigError, match="at least two atomic tools"):
        brancher(composites={"s2": ["s"]})


class Scripted(MultiTurn):
    """multi_turn whose sampler answers each context with ``lookup`` (log-prob −0.5 per token)."""

    def _sample(self, policy, ids, mask, pre, generator, greedy, entropy):
        contexts = policy.tokenizer.batch_decode([row[m.bool()].tolist() for row, m in zip(ids, mask)],
                                                 skip_special_tokens=True)
        rids, rmask = policy.encode_completions([lookup(c) for c in contexts])
        return SampleOutput(rids, rmask, -0.5 * rmask.float(), torch.zeros(len(ids), dtype=torch.bool),
                            hidden=torch.zeros(len(ids), policy.hf_model.config.hidden_size))


def lookup(context: str) -> str:
    """A solver that searches atomically: the subject, then (two hops) its friend, then answers."""
    question, *turns = [part for part in context.split("|") if part]
    words = question.rstrip("?").split()
    rows = [row.split() for turn in turns for row in turn.split(";", 1)[1].split(", ")]
    if not rows:
        return "s:" + words[-1]
    if "friend" in words and len(rows) == 1:
        return "s:" + rows[0][1].removeprefix("f=")
    return "a:" + rows[-1][2 if words[1] == "city" else 3][2:]


def scripted_rollout(p_two_hop):
    recipe = load_recipe("cipo", [f"task.env.p_two_hop={p_two_hop}"])
    task = build_task(recipe.task)
    engine = Scripted(tree=recipe.engine["tree"])
    engine.setup(EngineSetup(task, [], 2, task.max_completion_chars + 1))
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                               max_position_embeddings=256))
    examples = task.examples("train", 4, seed=0)
    return engine, engine.rollout(policy, examples, list(range(4)), torch.Generator().manual_seed(0))


def test_the_recipes_brancher_mines_and_replays_through_the_mined_skill():
    engine, got = scripted_rollout(1.0)  # two hops: every success searches twice, so s2 = (s, s) is mined
    x = got.batch.extras
    assert got.batch.extras["correct"].all()
    assert engine.tree.mined == [("s", "s", "a"), ("s", "a"), ("s", "s")]
    assert x["skills_mined"].tolist() == [3.0] * len(x["traj"]) and (x["skills_offered"] == 1).all()
    first = x["step"] == 0
    assert (x["cf_decision"][first] == 1).all() and (x["cf_decision"][~first] == 0).all()
    assert (x["cf_delta"] == 0).all()  # s2:x then the answer succeeds as well
    out = CIPO()(got.batch).diagnostics
    assert out["cipo/mined_skills"] == 3.0 and out["cipo/mined_offered"] == 1.0 and out["cipo/decision_frac"] == 1.0
    engine, got = scripted_rollout(0.0)  # one hop: (s, a) alone, no composite to offer, no replay
    assert engine.tree.mined == [("s", "a")] and (got.batch.extras["cf_decision"] == 0).all()
    assert CIPO()(got.batch).diagnostics["cipo/mined_offered"] == 0.0
