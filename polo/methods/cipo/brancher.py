"""CIPO's counterfactual imagination: each root episode's first tool-granularity decision replayed with the other
choice and finished by the policy (``tree: {name: cipo}``; the ``cipo`` advantage reads ``cf_delta``).

Each step the skills are mined from the step's successful root episodes (CIPO, "Counterfactual Imagination Policy
Optimization": "mines executable skills from successful trajectories under a budget"): every episode's valid
actions as atomic tool names (the text before ``:``; a composite tool expanded by ``composites``), then
``mine_skills`` (contiguous tool n-grams, 2 ≤ n ≤ ``n_max``, scored by the calls they save, the best ``k``). A
mined skill is executable when the environment runs it as one action: a composite of ``composites`` whose atomic
sequence was mined (KBLookup's skill variant: ``s2`` = ``(s, s)``, a search then one of the friend).

Per root episode, the first turn t* whose action has an alternative at the other tool granularity in the state
it was taken in (``env.alternative``: ``s2:x`` ↔ ``s:x``) through a mined executable skill (the action is that
skill, or the skill's first atomic tool) is replayed with that alternative from that state (restored in a fresh
environment: ``Episode.branch``) and the policy plays the episode to its end; ``cf_delta`` = R − R^cf and
``cf_decision`` = 1 go on row t*. The replays are not rows (they only score the decision). Every row also carries
``skills_mined`` (the step's mined skills) and ``skills_offered`` (the composites mining found, offered as
alternatives).
"""
from __future__ import annotations

import torch
from pydantic import Field, PrivateAttr, field_validator

from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree
from polo.methods.cipo.skill_mining import mine_skills

COUNTERFACTUAL_TRAJ = 10**9
"""Trajectory ids of counterfactual replays (never rows) start here, clear of the batch's own ids."""


@BRANCHERS.register("cipo")
class CounterfactualReplays(Brancher):
    """A replay of each episode's first tool-granularity decision with the other choice; scores it, not trained."""

    paper = "Counterfactual Imagination Policy Optimization (CIPO; arXiv id not found)"
    provenance = "RECONSTRUCTED"
    writes = {"cf_decision": 0.0, "cf_delta": 0.0, "skills_mined": 0.0, "skills_offered": 0.0}
    engine_keys = {"counterfactuals": None}

    n_max: int = Field(3, ge=2)
    """Longest mined skill, in atomic tool calls (the spec's n_max)."""
    k: int = Field(8, ge=1)
    """Skills kept per step (the spec's K_skill budget)."""
    composites: dict[str, tuple[str, ...]] = {"s2": ("s", "s")}
    """The environment's composite tools and the atomic tools each runs, in order (default: KBLookup's skill
    variant, ``s2`` = two searches); a composite is offered as the other granularity only when its sequence was
    mined."""

    _mined: list[tuple[str, ...]] = PrivateAttr(default_factory=list)

    @field_validator("composites")
    @classmethod
    def _chains(cls, composites: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        short = {name: list(tools) for name, tools in composites.items() if len(tools) < 2}
        if short:
            raise ValueError(f"composites {short}: a composite runs at least two atomic tools")
        return composites

    @property
    def mined(self) -> list[tuple[str, ...]]:
        """The skills mined at the last step, best first."""
        return list(self._mined)

    def tools(self, actions: list[str]) -> list[str]:
        """The atomic tool names of ``actions`` (a composite expanded)."""
        return [tool for action in actions for tool in self.composites.get(tool_of(action), (tool_of(action),))]

    def mine(self, roots: list[Episode]) -> set[str]:
        """Mine the skills of the successful ``roots``; the composites among them (executable skills)."""
        sequences = [self.tools([r.action for r in ep.records if r.info["valid"]])
                     for ep in roots if ep.success]
        self._mined = mine_skills(sequences, self.n_max, self.k)
        return {name for name, tools in self.composites.items() if tuple(tools) in self._mined}

    def offered(self, action: str, alternative: str, skills: set[str]) -> bool:
        """Whether ``action`` ↔ ``alternative`` swaps a mined composite for its first atomic tool."""
        pair = (tool_of(action), tool_of(alternative))
        return any(skill in skills and self.composites[skill][0] == other
                   for skill, other in (pair, pair[::-1]))

    def branch_point(self, episode: Episode, action: str) -> bool:
        """The state before an action that has an alternative at the other tool granularity."""
        return episode.env.alternative(action) is not None

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the replays; write ``cf_decision`` and ``cf_delta`` on each decision row."""
        task, replays, decisions = engine.settings.task, [], []
        skills = self.mine(tree.roots)
        for ep in tree.roots:
            tree.extras.setdefault(ep.traj, {}).update(skills_mined=float(len(self._mined)),
                                                       skills_offered=float(len(skills)))
            for t, (action, _) in enumerate(ep.history):
                if t not in ep.states:  # no alternative there (branch_point)
                    continue
                alternative = Episode.branch(task.make_env(), ep, t, -1).env.alternative(action)
                if alternative is not None and self.offered(action, alternative, skills):
                    replays.append(Episode.branch(task.make_env(), ep, t + 1, COUNTERFACTUAL_TRAJ + len(replays),
                                                  replace_last=alternative))
                    decisions.append((ep, t))
                    break
        engine.play(policy, replays, generator, greedy=False)
        for (ep, t), replay in zip(decisions, replays):
            tree.extras.setdefault(ep.traj, {}).update({f"cf_decision@{t}": 1.0,
                                                        f"cf_delta@{t}": ep.episode_return - replay.episode_return})


def tool_of(action: str) -> str:
    """An action's tool name: the text before its first ``:`` (the whole action without one)."""
    return action.partition(":")[0]
