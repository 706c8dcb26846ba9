"""Episodes of a text environment as the multi-turn engine plays them, and the host-side record of each turn.

An ``Episode`` holds a live environment, the (action, observation) history the policy's context is rendered
from, and its return. ``Episode.start`` begins a root episode; ``Episode.branch`` puts a fresh environment in
the state another episode was in after some turns, so a branch continues from that state without the copied
turns becoming rows of its own: the parent owns them (the prefix-ownership rule of rollout trees). The state
is restored from the snapshot the parent kept there while it played (``keep_state``: the engine keeps one at
each turn its brancher may branch at, and none in a run without a tree); only an environment that offers no
snapshot and declares itself ``deterministic`` has it re-created by replaying the parent's actions from the
seed. An environment with neither is refused (``check_restorable``) before any episode is played.

A ``TurnRecord`` is one played turn on the host side: the context the policy read (text, or chat messages
for a chat-template checkpoint), the action, the observation, the environment's ``info`` (validity, tool
error, anchor observation, oracles), the episode's identity and its tree position (``parent`` trajectory,
``depth``). Input providers build their probes from these records (the answer probe, InfoPO's
counterfactual context, HiMPO's memory probe).

A ``Tree`` is one step's rollout tree as it grows: the root episodes and their decoding calls, then whatever a
brancher (``polo.engines.branches``) adds; the engine turns it into step rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polo.core.registry import ConfigError
from polo.envs import Environment
from polo.tasks.base import Example


@dataclass
class TurnRecord:
    """One turn: row ``step`` of trajectory ``traj``; ``action_prefix`` is the part of the action that was
    forced (copied from the parent at a token-offset branch) rather than sampled."""

    traj: int
    step: int
    context: str | Example
    action: str
    observation: str
    reward: float
    info: dict[str, Any]
    seed: int
    prompt: str
    gold: str | None
    probe_prefix: str | None
    terminated: bool = False
    truncated: bool = False
    parent: int = -1
    depth: int = 0
    action_prefix: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    """What an outer loop recorded about the turn's surroundings (``instruction``, ``harness_id``)."""

    @property
    def context_text(self) -> str:
        """The context as text (a chat context: the messages' contents joined by the turn separator)."""
        return self.context if isinstance(self.context, str) else self.context.prompt


@dataclass
class Episode:
    """A live episode: its environment, seed, history, return so far and tree position."""

    env: Environment
    seed: int
    traj: int
    history: list[tuple[str, str]] = field(default_factory=list)
    episode_return: float = 0.0
    parent: int = -1
    depth: int = 0
    first_step: int = 0
    """Turns copied from the parent (not rows of this episode)."""
    records: list[TurnRecord] = field(default_factory=list)
    states: dict[int, tuple[Any, float] | None] = field(default_factory=dict)
    """Branch points kept while playing (``keep_state``): turns played → the environment's snapshot and the
    return so far, or None where the environment offers no snapshot (a branch from there replays)."""

    @classmethod
    def start(cls, env: Environment, seed: int, traj: int) -> "Episode":
        env.reset(seed)
        return cls(env, seed, traj)

    @classmethod
    def branch(cls, env: Environment, parent: "Episode", turns: int, traj: int,
               replace_last: str | None = None, hint: str | None = None) -> "Episode":
        """The state of ``parent`` after its first ``turns`` turns, in ``env`` (a fresh environment built like the
        parent's): restored from the state the parent kept there, or replayed from the seed when it kept none and
        the environment is deterministic. With ``replace_last`` the last of those turns takes that action instead
        of the parent's (a counterfactual: the state before it is restored, then the action is played);
        ``hint`` is appended to the last copied observation as the branch's context shows it (a HINT: the
        environment's state, and so the anchors, do not change)."""
        if turns > len(parent.history):
            raise ValueError(f"episode {parent.traj} has {len(parent.history)} turns; cannot branch after {turns}")
        if replace_last is not None and not turns:
            raise ValueError("a counterfactual branch replaces an action: branch after at least one turn")
        before = turns - (replace_last is not None)
        episode = cls(env, parent.seed, traj, parent=parent.traj, depth=parent.depth + 1, first_step=turns)
        episode._enter(parent, before)
        if replace_last is not None:
            episode.apply(replace_last)
        if hint:
            if not episode.history:
                raise ValueError("a hint is appended to an observation: branch after at least one turn")
            action, observation = episode.history[-1]
            episode.history[-1] = (action, f"{observation}, {hint}")
        return episode

    def _enter(self, parent: "Episode", turns: int) -> None:
        """Put this new episode's environment in ``parent``'s state after ``turns`` turns, with that history and
        return: the kept snapshot, else a replay (a deterministic environment only)."""
        kept = parent.states.get(turns)
        if kept is not None:
            state, self.episode_return = kept
            self.env.restore(state)
            self.history = list(parent.history[:turns])
            return
        check_restorable(self.env, f"a branch of episode {parent.traj}")
        if not self.env.deterministic:
            raise ValueError(f"episode {parent.traj} kept no state after {turns} turns and {self.env.name} is not "
                             f"deterministic (no replay): the brancher's branch_point must keep that state")
        self.env.reset(parent.seed)
        for action, _ in parent.history[:turns]:
            self.apply(action)

    def keep_state(self) -> None:
        """Keep the state now (after ``len(history)`` turns) as a branch point: the environment's snapshot and the
        return so far, or only the point when the environment offers no snapshot (a deterministic one replays)."""
        self.states[len(self.history)] = (self.env.snapshot(), self.episode_return) if self.env.can_snapshot else None

    def apply(self, action: str):
        """Step the environment with ``action``; record it in the history and the return."""
        result = self.env.step(action)
        self.history.append((action, result.observation))
        self.episode_return += result.reward
        return result

    @property
    def done(self) -> bool:
        return self.env.done

    @property
    def success(self) -> bool:
        return self.env.success

    def gold(self) -> str | None:
        """The environment's gold answer as text; None when it has none."""
        gold = self.env.gold
        return None if gold is None else str(gold)


def check_restorable(env: Environment, who: str) -> None:
    """Refuse, in one line naming ``env`` and what it must offer, an environment whose earlier states ``who``
    cannot re-create: one with no ``snapshot()``/``restore()`` that does not declare itself ``deterministic``."""
    if not (env.can_snapshot or env.deterministic):
        raise ConfigError(f"{who} restores earlier states of environment {env.name}, which offers neither "
                          "snapshot()/restore() nor deterministic = True: add snapshot()/restore() (or copyable = "
                          "True when a deep copy of its private attributes is its state), or declare deterministic "
                          "= True when the same seed and actions always give the same state")


@dataclass
class Tree:
    """A step's rollout tree: ``roots`` and their decoding calls ``root_calls`` (as played), ``episodes`` (those
    whose final return is their rows' reward: the roots, then branches played to the end), ``calls`` (every
    decoding call, in row order), ``group_of`` (every trajectory's task; a branch takes its root's) and
    ``extras`` (per-row inputs by trajectory: ``{traj: {"<name>@<step>": value}}`` for one row, ``{traj: {name:
    value}}`` for every row of it)."""

    roots: list[Episode]
    root_calls: list[dict]
    group_of: dict[int, int]
    episodes: list[Episode] = field(init=False)
    calls: list[dict] = field(init=False)
    extras: dict[int, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.episodes, self.calls = list(self.roots), list(self.root_calls)

    def next_traj(self) -> int:
        """The first trajectory id no episode of the tree holds yet."""
        return max(self.group_of) + 1
