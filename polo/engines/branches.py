"""Rollout trees of the ``multi_turn`` engine: the ``Brancher`` component and its registry ``BRANCHERS``.

A brancher grows a step's tree from its played root episodes (``engine: {name: multi_turn, tree: {name: NAME,
...settings}}``): it picks branch points, builds the branches (``Episode.branch`` puts a fresh environment in the
root's state there, so a branch owns only the turns it samples), plays them with the engine and adds them to the
``Tree``. While the roots play, the engine keeps a snapshot of each state the brancher's ``branch_point`` names
(every state unless it says otherwise), and a branch restores it; an environment without snapshots is replayed
if it declares itself deterministic, and refused before any work otherwise. The engine knows no brancher by name:
it calls ``grow`` once per step, asks the sampler for per-token entropy when the brancher ``reads_entropy``, adds
the brancher's ``roles()`` to its own and writes every input of ``writes`` on every row (the brancher's value
where it set one, the declared default elsewhere).

The built-in branchers are each one method's, so each lives in its method folder
(``polo/methods/{opo_observation,cipo,reflectpo,appo}/brancher.py``, discovered on first lookup); a plugin registers more with ``@BRANCHERS.register("name")``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import torch

from polo.core.registry import METHODS, Component, ConfigError, Registry
from polo.engines.episodes import Episode, Tree


class Player(Protocol):
    """What a brancher uses of its engine: the run's ``EngineSetup`` and ``play`` (``MultiTurn.play``)."""

    settings: Any

    def play(self, policy, episodes: list[Episode], generator, greedy: bool, *, max_turns: int | None = None,
             action_prefix: dict[int, str | list[int]] | None = None, entropy: bool = False,
             keep: Callable[[Episode, str], bool] | None = None) -> list[dict]: ...


class Brancher(Component):
    """Grows the step's rollout tree from its root episodes; fields are its settings."""

    writes: ClassVar[dict[str, int | float]] = {}
    """The per-row inputs it writes into ``batch.extras`` (through ``Tree.extras``), each with the value rows it
    does not name get (an int default makes a long tensor, a float one a float tensor)."""
    reads_entropy: ClassVar[bool] = False
    """Whether it reads the roots' per-token sampling entropy (``call["out"].entropy`` of ``Tree.root_calls``)."""
    engine_keys: ClassVar[dict[str, str | None]] = {}
    """The ``multi_turn`` keys that configured it before rollout trees were components: old key → its setting
    here (None: the key was only its on/off switch). The first key is the switch: an old run's config.yaml grows
    this tree when that key is true or non-zero (``tree_from_engine_keys``)."""

    def roles(self) -> set[str]:
        """Model roles it reads besides the policy (``EngineSetup.models``)."""
        return set()

    def branch_point(self, episode: Episode, action: str) -> bool:
        """Whether the state ``episode`` is in, about to take ``action`` (after ``len(episode.history)`` turns),
        may be a branch point: the engine keeps it while the roots play (``Episode.keep_state``); every state
        by default."""
        return True

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Add this step's branches (episodes, decoding calls, groups, per-row inputs) to ``tree``."""
        raise NotImplementedError


BRANCHERS: Registry = Registry("brancher", (METHODS,))


class TreeInputs(frozenset):
    """The ``provides`` of an engine that grows rollout trees: read from the class, the engine's own inputs; read
    from a configured engine, those plus what its ``tree`` writes. ``|`` keeps the kind, so a subclass's
    ``provides = MultiTurn.provides | {...}`` still adds its tree's."""

    def __get__(self, engine, owner=None) -> frozenset[str]:
        tree = getattr(engine, "tree", None)
        return self if tree is None else frozenset(self) | frozenset(tree.writes)

    def __or__(self, other) -> "TreeInputs":
        return TreeInputs(frozenset(self) | frozenset(other))


def tree_from_engine_keys(config: Any) -> Any:
    """An engine section written before rollout trees were components (``observation_branches: 3``,
    ``counterfactuals: true``, ...: the branchers' ``engine_keys``) in the ``tree`` layout: the old keys are
    dropped and the brancher whose switch was on becomes ``tree`` with the old keys' values as its settings, so an
    old run folder resumes unchanged. A section that also sets ``tree``, or switches on two branchers, is
    refused."""
    if not isinstance(config, dict):
        return config
    config, found = dict(config), []
    for name, cls in BRANCHERS:
        old = {key: config.pop(key) for key in cls.engine_keys if key in config}
        switch = next(iter(cls.engine_keys), None)
        if old.get(switch):
            settings = {cls.engine_keys[k]: v for k, v in old.items() if cls.engine_keys[k] is not None}
            found.append((f"engine.{switch}", {"name": name, **settings}))
    if not found:
        return config
    if len(found) > 1 or config.get("tree") is not None:
        keys = [key for key, _ in found] + (["engine.tree"] if config.get("tree") is not None else [])
        trees = ", ".join(f"engine.tree: {tree}" for _, tree in found)
        raise ConfigError(f"{' and '.join(keys)} each grow a rollout tree, and an engine grows one: keep one of "
                          f"{trees} (the old keys are now engine.tree's settings)")
    return {**config, "tree": found[0][1]}
