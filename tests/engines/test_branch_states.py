"""Rollout trees restore a branch point's state from a snapshot, not by replay: a non-deterministic environment
with side effects is branched correctly (the branch reads exactly its parent's context, nothing is reset or
stepped again); one that offers neither snapshots nor determinism is refused before any episode is played; a
deterministic one without snapshots is replayed; and on the built-in environments every brancher (and RTPO's
reverse_turn) gives the same rows from snapshots as from replay."""
import copy
import random
from typing import ClassVar

import pytest
import torch
from pydantic import PrivateAttr

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.branches import BRANCHERS, Brancher
from polo.engines.episodes import Episode, Tree
from polo.envs import ENVIRONMENTS, Environment, Transition, register_environment
from polo.envs.guessnum import GuessNum
from polo.envs.kblookup import KBLookup
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.tasks import build_task

CALLS = {"reset": 0, "step": 0}
"""Side effects of the test environments: every reset and every step counts here."""
ENTROPY = random.Random()
"""An unseeded generator: the secret a reset draws is not a function of the seed."""


class Drifting(Environment):
    """A secret drawn at reset from outside the seed, then a trail of the actions taken; every call counted."""

    _secret: int = PrivateAttr(0)
    _trail: list[str] = PrivateAttr(default_factory=list)

    @property
    def turn_limit(self) -> int:
        return 3

    def _generate(self, rng: random.Random) -> str:
        CALLS["reset"] += 1
        self._secret, self._trail = self.draw(rng), []
        return f"secret {self._secret}"

    def draw(self, rng: random.Random) -> int:
        return ENTROPY.randrange(10**9)

    def _transition(self, action: str) -> Transition:
        CALLS["step"] += 1
        self._trail.append(action[:2])
        return Transition(f"{self._secret} {'/'.join(self._trail)}", float(len(self._trail) * len(action) % 3))


class Snapshots(Drifting):
    copyable: ClassVar[bool] = True


class Replays(Drifting):
    deterministic: ClassVar[bool] = True

    def draw(self, rng: random.Random) -> int:
        return rng.randrange(10**9)


@pytest.fixture(scope="module")
def policy():
    torch.manual_seed(0)
    return build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                             max_position_embeddings=256))


@pytest.fixture
def envs():
    """The three test environments registered for one test; the retry brancher: each root's last turn again."""
    for name, cls in (("drift-snapshots", Snapshots), ("drift-plain", Drifting), ("drift-replays", Replays)):
        register_environment(name)(cls)

    @BRANCHERS.register("test_retry")
    class Retry(Brancher):
        def grow(self, engine, policy, tree, generator):
            children = []
            for ep in tree.roots:
                for turns in (0, len(ep.history) - 1):
                    traj = tree.next_traj()
                    children.append(Episode.branch(engine.settings.task.make_env(), ep, turns, traj))
                    tree.group_of[traj] = tree.group_of[ep.traj]
            tree.calls += engine.play(policy, children, generator, greedy=False)
            tree.episodes += children

    yield
    for name in ("drift-snapshots", "drift-plain", "drift-replays"):
        ENVIRONMENTS._registered.pop(name)
    BRANCHERS._registered.pop("test_retry")


def engine_for(env: str, engine: dict, G: int = 3):
    task = build_task({"name": "environment", "env": {"name": env}, "history_window": 4})
    eng = ENGINES.build(engine, "engine")
    eng.setup(EngineSetup(task, [], G, task.max_completion_chars + 1))
    return task, eng


def branch_rows_start_from_their_parents(got) -> int:
    """Each branch's first row reads its parent's context at that turn; returns the number of branches."""
    turns = got.turns
    row = {(r.traj, r.step): i for i, r in enumerate(turns)}
    firsts = [i for i, r in enumerate(turns) if r.depth == 1 and (r.traj, r.step - 1) not in row]
    for i in firsts:
        child = turns[i]
        parent = turns[row[child.parent, child.step]]
        assert child.context == parent.context and child.info["anchor_obs"] == parent.info["anchor_obs"]
        assert child.prompt == parent.prompt and torch.equal(got.batch.prompt_ids[i], got.batch.prompt_ids[row[
            child.parent, child.step]])
    return len(firsts)


def retried(policy, env: str):
    """One rollout of 2 tasks with ``test_retry`` branches on ``env``, and the resets and steps it made."""
    task, eng = engine_for(env, {"name": "multi_turn", "tree": {"name": "test_retry"}})
    examples, before = task.examples("train", 2, seed=0), dict(CALLS)
    got = eng.rollout(policy, examples, [0, 1], torch.Generator().manual_seed(0))
    assert branch_rows_start_from_their_parents(got) == 2 * 2 * 3
    return got, {k: CALLS[k] - before[k] for k in CALLS}


def test_a_non_deterministic_environment_is_branched_from_its_snapshots(policy, envs):
    got, after = retried(policy, "drift-snapshots")
    assert after == {"reset": 2 * 3, "step": got.batch.batch_size}  # the roots' resets; every step is a row
    returns = {r.traj: float(got.batch.rewards[i, 0]) for i, r in enumerate(got.turns)}
    for traj in {r.traj for r in got.turns if r.depth == 1}:  # its parent's rewards before it, then its own
        own = [t for t in got.turns if t.traj == traj]
        parent = [t for t in got.turns if t.traj == own[0].parent]
        assert returns[traj] == sum(t.reward for t in parent[:own[0].step]) + sum(t.reward for t in own)


def test_a_deterministic_environment_without_snapshots_is_replayed(policy, envs):
    got, after = retried(policy, "drift-replays")
    replayed = 2 * 3 * 2  # the branches after 2 turns replay them
    assert after == {"reset": 2 * 3 + 2 * 2 * 3, "step": got.batch.batch_size + replayed}


@pytest.mark.parametrize("engine", [
    *({"name": "multi_turn", "tree": {"name": name}} for name in ("opo_observation", "cipo", "reflectpo", "appo",
                                                                   "test_retry")),
    {"name": "reverse_turn"}], ids=lambda e: e.get("tree", e)["name"])
def test_an_environment_with_neither_is_refused_before_any_episode(policy, envs, engine):
    task = build_task({"name": "environment", "env": {"name": "drift-plain"}, "history_window": 4})
    eng = ENGINES.build(engine, "engine")
    before = dict(CALLS)
    with pytest.raises(ConfigError, match=r"^engine.* restores earlier states of environment drift-plain, which offers "
                                          r"neither snapshot\(\)/restore\(\) nor deterministic = True: add [^\n]*$"):
        eng.setup(EngineSetup(task, [], 2, task.max_completion_chars + 1))
    assert CALLS == before


def test_without_a_tree_nothing_is_kept_and_any_environment_plays(policy, envs, monkeypatch):
    task, eng = engine_for("drift-plain", {"name": "multi_turn"})
    got = eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    assert got.batch.batch_size == 3 * 3
    taken = []
    monkeypatch.setattr(Snapshots, "snapshot", lambda self: taken.append(1) or Environment.snapshot(self))
    task, eng = engine_for("drift-snapshots", {"name": "multi_turn"})
    eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    assert not taken
    task, eng = engine_for("drift-snapshots", {"name": "multi_turn", "tree": {"name": "test_retry"}})
    eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    assert len(taken) == 3 * 3  # with a tree: before each of the roots' turns (test_retry may branch at any)


def test_reverse_turn_continues_from_the_base_episodes_snapshots(policy, envs):
    task, eng = engine_for("drift-snapshots", {"name": "reverse_turn", "nodes_per_task": 2, "continuations": 2})
    examples, generator = task.examples("train", 2, seed=0), torch.Generator().manual_seed(0)
    base_resets = CALLS["reset"]
    for level in (3, 2, 1):
        got = eng.rollout(policy, examples, [0, 1], generator)
        prompts = {ep.env.prompt for group in eng._sweep["episodes"] for ep in group}
        for r in got.turns:  # each continuation reads the base episode's secret and its first level-1 turns
            assert r.step == level - 1 and r.prompt in prompts and r.context.startswith(r.prompt)
    assert CALLS["reset"] - base_resets == 2 * 3  # the base episodes' resets only


BUILT_IN_TREES = [  # an untrained policy seldom searches: OPO's roots start their first action with "s:", CIPO's
    # take the expert's first action (a skill call, whose atomic alternative is then feasible)
    ({"name": "KBLookup-v0"}, {"name": "opo_observation", "branches": 2, "uncertainty": 0.0, "redundancy": 1.0}),
    ({"name": "KBLookup-v0", "skills": True}, {"name": "cipo"}),
    ({"name": "GuessNum-v0"}, {"name": "reflectpo", "branches": 2, "max_points": 3}),
    ({"name": "KBLookup-v0"}, {"name": "appo", "branches": 2, "window": 4}),
]


def rollout_rows(policy, env, engine, steps=1):
    """The rows of ``steps`` rollouts (a fresh engine, fixed seeds) and how many states were restored."""
    task = build_task({"name": "environment", "env": env, "history_window": 4})
    eng = ENGINES.build(engine, "engine")
    reference = copy.deepcopy(policy)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    eng.setup(EngineSetup(task, [], 4, task.max_completion_chars + 1, models={"reference": reference}))
    examples, generator = task.examples("train", 3, seed=0), torch.Generator().manual_seed(0)
    if engine.get("tree", {}).get("name") not in ("opo_observation", "cipo"):
        return [eng.rollout(policy, examples, [0, 1, 2], generator) for _ in range(steps)]
    episodes = eng.start([e.columns["seed"] for e in examples for _ in range(4)])
    opo = engine["tree"]["name"] == "opo_observation"
    forced = {ep.traj: "s:" if opo else ep.env.expert() + ";" for ep in episodes}
    calls = eng.play(policy, episodes, generator, False, action_prefix=forced,
                     entropy=True, keep=eng.tree.branch_point)
    tree = Tree(episodes, calls, {ep.traj: ep.traj // 4 for ep in episodes})
    eng.tree.grow(eng, policy, tree, generator)
    return [eng.step_rows(tree.calls, tree.episodes, tree.group_of, examples, [0, 1, 2], tree.extras)]


@pytest.mark.parametrize("env, tree", BUILT_IN_TREES, ids=lambda x: x["name"])
def test_built_in_branchers_give_the_same_rows_from_snapshots_as_from_replay(policy, env, tree, monkeypatch):
    restored, resets = [], []
    original, reset = Environment.restore, Environment.reset
    monkeypatch.setattr(Environment, "restore", lambda self, state: restored.append(1) or original(self, state))
    monkeypatch.setattr(Environment, "reset", lambda self, seed: resets.append(1) or reset(self, seed))
    # CIPO offers a decision's alternative only through skills mined from successes (none by an untrained policy)
    monkeypatch.setattr(BRANCHERS.get("cipo"), "offered", lambda self, action, alternative, skills: True)
    engine = {"name": "multi_turn", "tree": tree}
    from_snapshots = rollout_rows(policy, env, engine)
    x = from_snapshots[0].batch.extras
    assert restored and (any(r.depth for r in from_snapshots[0].turns) or x["cf_decision"].sum() > 0)
    assert len(resets) == 3 + 3 * 4  # the examples' and the roots': no branch was replayed
    n = len(restored)
    for cls in (KBLookup, GuessNum):
        monkeypatch.setattr(cls, "copyable", False)
    from_replay = rollout_rows(policy, env, engine)
    assert len(restored) == n  # none restored: replayed
    assert_same(from_snapshots, from_replay)


def test_reverse_turn_gives_the_same_rows_from_snapshots_as_from_replay(policy, monkeypatch):
    engine, env = {"name": "reverse_turn", "nodes_per_task": 2, "continuations": 2}, {"name": "GuessNum-v0"}
    from_snapshots = rollout_rows(policy, env, engine, steps=3)
    monkeypatch.setattr(GuessNum, "copyable", False)
    assert_same(from_snapshots, rollout_rows(policy, env, engine, steps=3))


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        assert [(r.traj, r.step, r.context_text, r.action, r.observation, r.reward) for r in x.turns] == \
               [(r.traj, r.step, r.context_text, r.action, r.observation, r.reward) for r in y.turns]
        for name, value in vars(x.batch).items():
            other = getattr(y.batch, name)
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, other), name
        assert x.batch.extras.keys() == y.batch.extras.keys()
        for name in x.batch.extras:
            assert torch.equal(x.batch.extras[name], y.batch.extras[name]), name


def test_reverse_turn_checkpoints_no_sweep_of_a_non_deterministic_environment_and_says_so(policy, envs):
    task, eng = engine_for("drift-snapshots", {"name": "reverse_turn", "nodes_per_task": 1, "continuations": 2})
    eng.rollout(policy, task.examples("train", 1, seed=0), [0], torch.Generator().manual_seed(0))
    state = eng.state_dict()
    assert eng.level > 0 and state["sweep"] is None and state["dropped"]
    _, resumed = engine_for("drift-snapshots", {"name": "reverse_turn", "nodes_per_task": 1, "continuations": 2})
    with pytest.warns(UserWarning, match=r"^engine reverse_turn: the checkpoint holds no sweep \(environment "
                                         r"drift-snapshots is not deterministic\): the resumed run starts a new sweep"):
        resumed.load_state_dict(state)
    assert resumed.level == 0
