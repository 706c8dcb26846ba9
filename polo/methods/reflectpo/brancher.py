"""ReflectPO's reflection-guided sampling: hinted recovery branches from the erroneous states of root episodes
(``tree: {name: reflectpo}``; the ``reflectpo`` advantage credits the tree's nodes).

In each root episode the states its turns led to are checked in order: a repeated visit (the state was already
acted in on the path), the result of an invalid action or of a failed tool call is erroneous. From up to
``max_points`` erroneous states per task, ``branches`` children replay the path to that state, read a hint
appended to its observation (never trainable: it is in the context) and finish the episode with the policy.
"""
from __future__ import annotations

import torch
from pydantic import Field

from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree, TurnRecord


def _clean(action: str) -> str:
    """An action quoted inside a hint, without the separators of the rendered context."""
    return action.replace("|", " ").replace(";", " ").strip()


def recovery_hint(record: TurnRecord, seen: set[str]) -> str | None:
    """The hint for the state a turn led to, or None when that state is not erroneous: the result of an invalid
    action or a failed tool call, or a repeated visit (the turn's observation is one of ``seen``, the states
    already acted in on this path, this turn's included)."""
    if not record.info["valid"]:
        return f"hint: {_clean(record.action)} is not a valid action, try another"
    if record.info["tool_error"]:
        return f"hint: {_clean(record.action)} found nothing, try another"
    if record.observation in seen:
        return f"hint: you were here before, {_clean(record.action)} did not help, try another"
    return None


@BRANCHERS.register("reflectpo")
class RecoveryBranches(Brancher):
    """Hinted children from each erroneous state (repeated visit, invalid action, failed tool call), played to
    the end."""

    paper = "ReflectPO: Reflection-guided Policy Optimization (arXiv id not found)"
    provenance = "RECONSTRUCTED"
    engine_keys = {"recovery_branches": "branches", "max_branch_points": "max_points"}

    branches: int = Field(2, ge=1)
    """Hinted children per erroneous state."""
    max_points: int = Field(4, ge=1)
    """Erroneous states branched per task."""

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the children to the end and add them to the tree (rows of their own, their returns as rewards)."""
        task, children, next_traj = engine.settings.task, [], tree.next_traj()
        budget: dict[int, int] = {}
        for ep in tree.roots:
            seen = set()
            for record in ep.records:
                seen.add(record.info["anchor_obs"])
                hint = recovery_hint(record, seen)
                group = tree.group_of[ep.traj]
                if hint is None or record.terminated or record.truncated or budget.get(group, 0) >= self.max_points:
                    continue
                budget[group] = budget.get(group, 0) + 1
                for _ in range(self.branches):
                    children.append(Episode.branch(task.make_env(), ep, record.step + 1, next_traj, hint=hint))
                    tree.group_of[next_traj] = group
                    next_traj += 1
        if children:
            tree.calls += engine.play(policy, children, generator, greedy=False)
            tree.episodes += children
