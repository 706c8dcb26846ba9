"""Who writes an agent's hints (polo.engines.hints): the template stand-in or the teacher role, for SOPO's
``socratic`` engine (a hint after a wrong guess) and ReflectPO's recovery branches (a hint at an erroneous state).
The teacher is the built-in (untrained) model where any text will do, and a scripted writer where the test must
know what the teacher saw and wrote."""
import pytest
import torch

import polo.engines.hints as hints_module
from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.hints import HintRequest, Hints, cut
from polo.envs import make
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task
from polo.train.config import load_recipe

GUESS = {"name": "GuessNum-v0", "teacher_hints": True, "hint_text": False}


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=256))


def played(policy, env, engine, teacher=None, G=4, n=3, seed=0):
    task = build_task({"name": "environment", "env": env})
    eng = ENGINES.build(engine, "engine")
    setup = EngineSetup(task, [], G, task.max_completion_chars + 1)
    if teacher is not None:
        setup.models["teacher"] = teacher
    logged = {}
    setup.reward_context.log_metric = lambda name, value: logged.setdefault(name, []).append(value)
    eng.setup(setup)
    got = eng.rollout(policy, task.examples("train", n, seed=seed), list(range(n)), torch.Generator().manual_seed(seed))
    return eng, got, logged


@pytest.fixture
def scripted(monkeypatch):
    """A teacher that writes ``look at <what follows 'answer: ' or 'error: ' in its request>`` (then a separator
    and text the cut drops); every request it read is kept."""
    asks = []

    def write(model, prompts, max_tokens, generator=None, greedy=False):
        asks.extend(prompts)
        return [f"look at {p.split(': ')[-1].split('|')[0]}|junk" for p in prompts]

    monkeypatch.setattr(hints_module, "sample_replies", write)
    return asks


def next_contexts(got):
    """Each turn's record with the same trajectory's next turn (None after its last)."""
    at = {(r.traj, r.step): r for r in got.turns}
    return [(r, at.get((r.traj, r.step + 1))) for r in got.turns]


def guessing(policy, engine, teacher=None, env=GUESS, seeds=(0, 1, 2, 3, 4, 5)):
    """Episodes whose first action is forced to the guess ``=1`` (wrong unless the number is 1), then the policy's;
    each answered (wrong first guess, next turn) pair of records, and the logged metrics."""
    eng, _, logged = played(policy, env, engine, teacher, n=1)
    episodes = eng.start(list(seeds))
    eng.play(policy, episodes, torch.Generator().manual_seed(0), False,
             action_prefix={ep.traj: "=1;" for ep in episodes})
    answered = [(ep.records[0], ep.records[1]) for ep in episodes if ep.records[0].info["hint"]]
    assert len(answered) >= len(seeds) - 1  # at most one number is 1
    return answered, logged


def test_guessnum_only_flags_the_turn_when_the_teacher_writes():
    env = make(GUESS)
    env.reset(0)  # x = 7
    wrong = env.step("=3")
    assert wrong.observation == "u: wrong" and wrong.info["hint"] == 1.0
    assert env.step("=99").info["hint"] == 0.0  # out of range: invalid, no hint due
    assert env.step("=7").info["hint"] == 0.0


def test_the_teacher_sees_the_answer_and_its_hint_reaches_the_next_context(policy, scripted):
    answered, logged = guessing(policy, {"name": "socratic", "hints": {"source": "teacher"}}, teacher=policy)
    for record, following in answered:
        assert record.observation == "u: wrong"  # the environment's reply is unchanged: the hint is context
        assert following.context_text.endswith(f"=1;u: wrong, hint: look at {record.gold}|")
        assert f"{record.context_text}=1;u: wrong|answer: {record.gold}|hint:" in scripted
    assert len(scripted) >= len(answered) and logged["hints/written"][0] == len(answered)


def test_the_built_in_teacher_writes_hints_the_student_reads(policy):
    engine = {"name": "socratic", "hints": {"source": "teacher", "max_tokens": 6}}
    answered, logged = guessing(policy, engine, teacher=policy)
    shown = [following.context_text.rsplit("=1;u: wrong", 1)[1] for _, following in answered]
    assert logged["hints/written"][0] == len(answered)
    assert sum(s == "|" for s in shown) == round(len(answered) * logged["hints/empty_frac"][0])  # empty: not shown
    assert all(s.startswith(", hint: ") and 0 < len(s) - len(", hint: |") <= 6 for s in shown if s != "|")


def test_the_template_source_leaves_the_environments_hint_alone(policy):
    answered, logged = guessing(policy, {"name": "socratic", "hints": {"source": "template"}},
                                env={"name": "GuessNum-v0", "teacher_hints": True})
    assert not logged
    for record, following in answered:
        assert record.observation.startswith("u: wrong, hint: ask ")
        assert following.context_text.endswith(f"=1;{record.observation}|")


def test_source_and_environment_must_agree_in_one_line():
    for source, env, fix in (("teacher", {"name": "GuessNum-v0", "teacher_hints": True}, "hint_text=false"),
                             ("template", GUESS, "hint_text=true")):
        with pytest.raises(ConfigError, match=fix) as err:
            played(None, env, {"name": "socratic", "hints": {"source": source}})
        assert "\n" not in str(err.value)
    for recipe, key in (("sopo", "engine.hints.source"), ("reflectpo", "engine.tree.hints.source")):
        with pytest.raises(ConfigError, match="'template' or 'teacher'") as err:
            load_recipe(recipe, [f"{key}=oracle"])
        assert "\n" not in str(err.value) and "oracle" in str(err.value)
    with pytest.raises(ConfigError, match="lacks the field") as err:
        load_recipe("sopo", ["engine.hints.ask=no context"])
    assert "\n" not in str(err.value)


def test_a_teacher_shown_the_answer_needs_one():
    request = HintRequest("ctx|", "=3", "u: wrong", "wrong answer", None, "")
    with pytest.raises(ConfigError, match=r"no gold answer: drop \{gold\}"):
        Hints(source="teacher", ask="{context}{gold}").asks([request], "engine.hints")
    assert Hints(source="teacher", ask="{context}{action}:{error}").asks([request], "x") == ["ctx|=3:wrong answer"]
    assert cut(" go n;s|x\ny") == "go n"


def test_an_overlong_request_is_refused_in_one_line(policy):
    request = HintRequest("x" * 250, "n", "wall", "invalid action", None, "")
    with pytest.raises(ConfigError, match=r"engine.hints: a teacher's hint request of \d+ tokens plus 16 hint tokens "
                                          r"exceeds the teacher's 256 positions"):
        Hints(source="teacher").write(EngineSetup(None, [], 1, 1, models={"teacher": policy}), [request],
                                      "engine.hints")


def test_recovery_branches_read_the_teachers_hint(policy, scripted):
    tree = {"name": "reflectpo", "branches": 2, "max_points": 3, "hints": {"source": "teacher"}}
    eng, got, logged = played(policy, {"name": "TextGrid-v0", "obs_mode": "local"},
                              {"name": "multi_turn", "tree": tree}, teacher=policy, G=4, n=2)
    assert eng.roles() == {"teacher"}
    x, turns = got.batch.extras, got.turns
    first = {}
    for r in turns:
        if r.depth == 1 and r.traj not in first:
            first[r.traj] = r
    assert first and len(scripted) == len(first) // 2  # one request per branch point, two children each
    assert logged["hints/written"] == [len(scripted)] and logged["hints/empty_frac"] == [0.0]
    parent = {(r.traj, r.step): r for r in turns if r.depth == 0}
    for child in first.values():
        erroneous = parent[child.parent, child.step - 1]
        kind = child.context_text.split(f"{erroneous.observation}, hint: look at ")[1].split("|")[0]
        assert kind in ("invalid action", "failed tool call", "repeated visit")
        assert f"{erroneous.context_text}{erroneous.action};{erroneous.observation}|error: {kind}|hint:" in scripted
    assert int((x["depth"] == 1).sum()) > 0
