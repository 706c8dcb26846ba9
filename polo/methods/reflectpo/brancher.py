"""ReflectPO's reflection-guided sampling: hinted recovery branches from the erroneous states of root episodes
(``tree: {name: reflectpo}``; the ``reflectpo`` advantage credits the tree's nodes).

In each root episode the states its turns led to are checked in order: a repeated visit (the state was already
acted in on the path), the result of an invalid action or of a failed tool call is erroneous. From up to
``max_points`` erroneous states per task, ``branches`` children continue from that state, read a hint appended
to its observation (never trainable: it is in the context) and finish the episode with the policy.

The hint comes from ``hints.source`` (polo.engines.hints): ``template``, a fixed sentence per kind of error naming
the failed action (the cheap stand-in), or ``teacher``, the ``teacher`` role writing it from ``hints.ask`` (by
default the context the policy read, the failed action, the reply and the kind of error; ``{gold}`` shows it the
environment's answer too), one batched call per step for every branch point (``log_metric/hints/written``,
``log_metric/hints/empty_frac``). The children of one point share its hint.
"""
from __future__ import annotations

import torch
from pydantic import Field

from polo.engines.branches import BRANCHERS, Brancher, Player
from polo.engines.episodes import Episode, Tree, TurnRecord
from polo.engines.hints import HintRequest, Hints, quote

TEMPLATES = {"invalid action": "hint: {action} is not a valid action, try another",
             "failed tool call": "hint: {action} found nothing, try another",
             "repeated visit": "hint: you were here before, {action} did not help, try another"}
"""The template hint of each kind of error."""


def error_kind(record: TurnRecord, seen: set[str]) -> str | None:
    """What makes the state a turn led to erroneous (a key of ``TEMPLATES``), or None when it is not: the result
    of an invalid action or a failed tool call, or a repeated visit (the turn's observation is one of ``seen``, the
    states already acted in on this path, this turn's included)."""
    if not record.info["valid"]:
        return "invalid action"
    if record.info["tool_error"]:
        return "failed tool call"
    if record.observation in seen:
        return "repeated visit"
    return None


def template_hint(kind: str, action: str) -> str:
    """The template hint after ``action`` led to an error of ``kind``."""
    return TEMPLATES[kind].format(action=quote(action))


def recovery_hint(record: TurnRecord, seen: set[str]) -> str | None:
    """The template hint for the state a turn led to, or None when that state is not erroneous."""
    kind = error_kind(record, seen)
    return None if kind is None else template_hint(kind, record.action)


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
    hints: Hints = Hints()
    """Who writes the hint at an erroneous state: ``{source: template}`` or ``{source: teacher}`` (the teacher
    role, from ``ask``)."""

    def roles(self) -> set[str]:
        return self.hints.roles()

    def branch_point(self, episode: Episode, action: str) -> bool:
        """An erroneous state: the one the episode's last turn led to, when it is one (``error_kind``)."""
        seen = {record.info["anchor_obs"] for record in episode.records}
        return bool(episode.records) and error_kind(episode.records[-1], seen) is not None

    def grow(self, engine: Player, policy, tree: Tree, generator: torch.Generator) -> None:
        """Play the children to the end and add them to the tree (rows of their own, their returns as rewards)."""
        task, children, next_traj = engine.settings.task, [], tree.next_traj()
        points: list[tuple[Episode, TurnRecord, str]] = []
        budget: dict[int, int] = {}
        for ep in tree.roots:
            seen = set()
            for record in ep.records:
                seen.add(record.info["anchor_obs"])
                kind = error_kind(record, seen)
                group = tree.group_of[ep.traj]
                if kind is None or record.terminated or record.truncated or budget.get(group, 0) >= self.max_points:
                    continue
                budget[group] = budget.get(group, 0) + 1
                points.append((ep, record, kind))
        hints = self.hints.write(engine.settings, [
            HintRequest(r.context_text, r.action, r.observation, kind, r.gold, template_hint(kind, r.action))
            for _, r, kind in points], "engine.tree.hints")
        for (ep, record, _), hint in zip(points, hints):
            group = tree.group_of[ep.traj]
            for _ in range(self.branches):
                children.append(Episode.branch(task.make_env(), ep, record.step + 1, next_traj, hint=hint))
                tree.group_of[next_traj] = group
                next_traj += 1
        if children:
            tree.calls += engine.play(policy, children, generator, greedy=False)
            tree.episodes += children
