"""Episodes of a text environment as the multi-turn engine plays them, and the host-side record of each turn.

An ``Episode`` holds a live environment, the (action, observation) history the policy's context is rendered
from, and its return. ``Episode.start`` begins a root episode; ``Episode.branch`` re-creates the state after
some turns of another episode by replaying its actions in a fresh environment (environments are
deterministic given the seed and the actions), so a branch continues from that state without the copied
turns becoming rows of its own: the parent owns them (the prefix-ownership rule of rollout trees).

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
    """Turns replayed from the parent (not rows of this episode)."""
    records: list[TurnRecord] = field(default_factory=list)

    @classmethod
    def start(cls, env: Environment, seed: int, traj: int) -> "Episode":
        env.reset(seed)
        return cls(env, seed, traj)

    @classmethod
    def branch(cls, env: Environment, parent: "Episode", turns: int, traj: int,
               replace_last: str | None = None, hint: str | None = None) -> "Episode":
        """The state of ``parent`` after its first ``turns`` turns, replayed in ``env``; with ``replace_last``
        the last replayed turn takes that action instead of the parent's (a counterfactual); ``hint`` is
        appended to the last replayed observation as the branch's context shows it (a HINT: the environment's
        state, and so the anchors, do not change)."""
        actions = [a for a, _ in parent.history[:turns]]
        if turns > len(actions):
            raise ValueError(f"episode {parent.traj} has {len(actions)} turns; cannot branch after {turns}")
        if replace_last is not None:
            if not actions:
                raise ValueError("a counterfactual branch replaces an action: branch after at least one turn")
            actions[-1] = replace_last
        episode = cls.start(env, parent.seed, traj)
        episode.parent, episode.depth, episode.first_step = parent.traj, parent.depth + 1, turns
        for action in actions:
            episode.apply(action)
        if hint:
            if not episode.history:
                raise ValueError("a hint is appended to an observation: branch after at least one turn")
            action, observation = episode.history[-1]
            episode.history[-1] = (action, f"{observation}, {hint}")
        return episode

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
        try:
            return str(self.env.gold)
        except NotImplementedError:
            return None


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
