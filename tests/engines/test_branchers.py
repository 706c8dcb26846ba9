"""Rollout trees as registered branchers: a plugin's brancher plays in the multi_turn engine, which names none of
the built-in ones, and an old run's engine keys still load as the ``tree`` they meant."""
import re
from pathlib import Path

import pytest
import torch
import yaml

from polo.core.registry import ConfigError
from polo.policy.policy import build_tiny_policy
from polo.policy.tiny import TinyModelConfig
from polo.engines.branches import BRANCHERS, Brancher
from polo.engines.base import ENGINES, EngineSetup
from polo.engines.episodes import Episode
from polo.tasks import build_task
from polo.train.config import config_changes, load_recipe, load_run_config, resolved_tree

OLD_ENGINE = {"name": "multi_turn", "vllm": None, "similarity_thresh": None, "anchor": "observation",
              "observation_branches": 0, "branch_events": 1, "branch_uncertainty": 1.0, "branch_redundancy": 0.5,
              "counterfactuals": False, "recovery_branches": 0, "max_branch_points": 4, "token_branches": 0,
              "branch_window": 32, "branch_gamma": 0.9, "branch_alpha": 1.0}
"""The engine section of a multi_turn run's config.yaml written before rollout trees were branchers."""


@pytest.fixture
def retry_last():
    """A plugin's brancher, registered for one test: each root episode's last turn retried ``k`` times."""

    @BRANCHERS.register("test_retry_last")
    class RetryLast(Brancher):
        """Replays each root episode up to its last turn and lets the policy retry that turn, ``k`` times."""

        writes = {"retry": 0.0}
        k: int = 1

        def grow(self, engine, policy, tree, generator):
            children = []
            for ep in tree.roots:
                for _ in range(self.k):
                    traj = tree.next_traj()
                    children.append(Episode.branch(engine.settings.task.make_env(), ep, len(ep.history) - 1, traj))
                    tree.group_of[traj], tree.extras[traj] = tree.group_of[ep.traj], {"retry": 1.0}
            tree.calls += engine.play(policy, children, generator, greedy=False)
            tree.episodes += children

    yield RetryLast
    BRANCHERS._registered.pop("test_retry_last")


def test_a_plugin_brancher_grows_the_tree_of_a_multi_turn_rollout(retry_last):
    torch.manual_seed(0)
    policy = build_tiny_policy(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                               max_position_embeddings=256))
    task = build_task({"name": "environment", "env": {"name": "GuessNum-v0"}, "history_window": 4})
    engine = ENGINES.build({"name": "multi_turn", "tree": {"name": "test_retry_last", "k": 2}}, "engine")
    assert "retry" in engine.provides and "retry" not in ENGINES.get("multi_turn").provides
    assert engine.model_dump(mode="json")["tree"] == {"name": "test_retry_last", "k": 2}
    engine.setup(EngineSetup(task, [], 2, task.max_completion_chars + 1))
    got = engine.rollout(policy, task.examples("train", 2, seed=0), [0, 1], torch.Generator().manual_seed(0))
    x, turns = got.batch.extras, got.turns
    roots = {r.traj for r in turns if r.depth == 0}
    children = {r.traj for r in turns if r.depth == 1}
    assert len(roots) == 4 and len(children) == 2 * 4
    group = {r.traj: int(g) for r, g in zip(turns, got.batch.group)}
    last = {traj: max(r.step for r in turns if r.traj == traj) for traj in roots}
    for i, record in enumerate(turns):  # a child owns only the turns from its parent's last one on
        assert float(x["retry"][i]) == float(record.depth)
        if record.depth:
            assert record.step >= last[record.parent] and group[record.traj] == group[record.parent]


def test_the_engine_names_no_brancher():
    source = (Path(__file__).resolve().parents[2] / "polo" / "engines" / "multi_turn.py").read_text().lower()
    named = [name for name in ("opo", "cipo", "reflectpo", "appo", *BRANCHERS.names(),
                               *(key for _, cls in BRANCHERS for key in cls.engine_keys))
             if re.search(rf"\b{name}\b", source)]
    assert not named, f"multi_turn.py names {named}"


@pytest.mark.parametrize("name", ["opo_observation", "cipo", "reflectpo", "appo"])
def test_built_in_branchers_declare_settings_their_old_keys_map_onto(name):
    cls = BRANCHERS.get(name)
    assert cls.engine_keys and set(cls.engine_keys.values()) - {None} <= set(cls.model_fields)
    assert all(isinstance(default, (int, float)) for default in cls.writes.values())


@pytest.mark.parametrize("recipe, old", [
    ("opo_observation", {"observation_branches": 3, "branch_events": 1, "branch_uncertainty": 0.2,
                         "branch_redundancy": 0.5}),
    ("cipo", {"counterfactuals": True}),
    ("reflectpo", {"recovery_branches": 2, "max_branch_points": 4}),
    ("appo", {"token_branches": 3, "branch_window": 8, "branch_gamma": 0.9, "branch_alpha": 1.0}),
    ("gigpo", {}),
])
def test_an_old_run_config_with_the_engine_keys_of_before_loads_as_its_tree(recipe, old, tmp_path):
    now = resolved_tree(load_recipe(recipe))
    trained = {**now, "engine": {**OLD_ENGINE, **old}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(trained, sort_keys=False))
    assert resolved_tree(load_run_config(tmp_path)) == now
    assert config_changes(trained, now) == []


def test_old_keys_of_two_trees_are_refused_naming_the_keys_and_the_new_one():
    with pytest.raises(ConfigError, match=r"engine.counterfactuals and engine.recovery_branches each grow a rollout "
                                          r"tree.*engine.tree: \{'name': 'cipo'\}"):
        ENGINES.build({**OLD_ENGINE, "counterfactuals": True, "recovery_branches": 2}, "engine")
    with pytest.raises(ConfigError, match="engine.token_branches and engine.tree each grow"):
        ENGINES.build({"name": "multi_turn", "token_branches": 2, "tree": {"name": "cipo"}}, "engine")


def test_a_bad_tree_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="unknown brancher 'opo'; valid brancher names: appo, cipo, opo_observation"):
        ENGINES.build({"name": "multi_turn", "tree": {"name": "opo"}}, "engine")
    with pytest.raises(ConfigError, match="did you mean engine.tree.window"):
        ENGINES.build({"name": "multi_turn", "tree": {"name": "appo", "windw": 4}}, "engine")
