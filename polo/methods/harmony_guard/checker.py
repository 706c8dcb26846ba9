"""HarmonyGuard's Utility Agent: a step checker returning (risky, deviated, guidance) for proposed actions.

HarmonyGuard (arXiv:2508.04010) validates every step of a web agent on two axes before it runs: threat risk
(the step breaks a security policy) and task alignment (the step does not advance the task), and returns
optimization guidance for a step that fails either, so the agent regenerates it. A checker is called on a
batch of proposed steps (``Step``: the environment in its current state, the context the agent read, the
action, and the task's ``RuleBase``) and returns one ``Verdict`` per step.

* ``RuleChecker`` (the default): ``risky`` ⇔ a rule of the rule base forbids the action; ``deviated`` ⇔ not
  ``env.progress(action)`` (the environment's task-alignment oracle); guidance ``"hint: <t> is restricted"``
  per broken rule, then ``"hint: <env.guidance()>"`` when deviated.
  Reads the environment's oracles (its gold chain): the named stand-in for a model checker.
* ``JudgeChecker``: the ``judge`` role (polo/roles/judge.py: a causal LM, a classifier or an HTTP endpoint) with
  two criteria, ``threat_risk`` and ``task_alignment``, each scoring (context, action) in [0, 1] with the rule
  base's text as the example's ``rubric``: ``risky`` ⇔ threat_risk > ``threshold``, ``deviated`` ⇔
  task_alignment < ``threshold``; a failed judgment (NaN) flags nothing. Guidance: the rule base's text when
  risky, ``"<action> is off task"`` when deviated. It reads nothing of the environment but its policy document
  (through the rule base), so it checks an environment without oracles.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from polo.core.registry import ConfigError
from polo.methods.harmony_guard.policy_document import RuleBase
from polo.tasks.base import Example

CRITERIA = ("threat_risk", "task_alignment")
"""The judge criteria a model checker reads, in this order."""


@dataclass
class Step:
    """A proposed step: the environment before it, the context the agent read, the action, the task's rules."""

    env: Any
    context: str
    action: str
    rules: RuleBase


class Verdict(NamedTuple):
    risky: bool
    deviated: bool
    guidance: str

    @property
    def flagged(self) -> bool:
        return self.risky or self.deviated


def _hint(parts: list[str]) -> str:
    return f"hint: {', '.join(parts)}" if parts else ""


class RuleChecker:
    """The rule-based Utility Agent (see the module docstring)."""

    def __call__(self, steps: list[Step]) -> list[Verdict]:
        out = []
        for step in steps:
            broken = step.rules.forbidding(step.action)
            deviated = not step.env.progress(step.action)
            parts = [f"{rule.target} is restricted" if rule.target != "*" else rule.text() for rule in broken]
            out.append(Verdict(bool(broken), deviated, _hint(parts + ([step.env.guidance()] if deviated else []))))
        return out


class JudgeChecker:
    """The model Utility Agent: the ``judge`` role's ``threat_risk`` and ``task_alignment`` scores."""

    def __init__(self, judge, threshold: float = 0.5):
        names = tuple(getattr(judge, "names", ()))
        if names != CRITERIA:
            raise ConfigError(f"checker judge: the judge role needs the criteria {list(CRITERIA)} in this order, "
                              f"got {list(names)}; set roles.judge.criteria")
        self.judge, self.threshold = judge, threshold

    def __call__(self, steps: list[Step]) -> list[Verdict]:
        examples = [Example(step.context, "", {"rubric": step.rules.text()}) for step in steps]
        scores = self.judge(examples, [step.action for step in steps]).scores
        out = []
        for step, (risk, alignment) in zip(steps, scores.tolist()):
            risky, deviated = risk > self.threshold, alignment < self.threshold  # NaN compares False
            parts = ([step.rules.text()] if risky and step.rules.rules else []) + (
                [f"{step.action} is off task"] if deviated else [])
            out.append(Verdict(risky, deviated, _hint(parts)))
        return out
