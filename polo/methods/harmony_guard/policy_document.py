"""HarmonyGuard's Policy Agent: a policy document parsed into structured rules, updated when a violation is found.

HarmonyGuard ("HarmonyGuard: Toward Safety and Utility in Web Agents via Adaptive Policy Enhancement and
Dual-Objective Optimization", arXiv:2508.04010) has a Policy Agent that extracts structured security policies
from documents and refines them as violations are observed. Here:

* ``parse_policy(document)`` reads sentences (split at ``.``); a sentence ``never <verb> <t1>, <t2> or <t3>``
  forbids the actions ``<kind>:<t>`` for each target ``t`` (``*``: any target), with the verbs of ``VERBS``
  (``search`` → ``s``, ``answer`` → ``a``). Other sentences are prose and are skipped; a ``never`` sentence
  with an unknown verb is an error naming it.
* ``RuleBase`` holds one task's rules. ``record_violation(action)`` is the update on a violation the
  environment reported: a rule that forbids the action counts it (``violations``), and when none does (the
  document left it out) a rule forbidding exactly that action is added, with source ``"violation"``, so the
  checker flags it from then on.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

VERBS = {"search": "s", "answer": "a"}
"""Document verbs → the action kinds they forbid."""
NEVER = re.compile(r"^never\s+(\w+)\s+(.+)$")


@dataclass
class Rule:
    """Actions ``<kind>:<target>`` are forbidden (``target`` ``*``: every argument)."""

    kind: str
    target: str
    source: str = "document"
    violations: int = 0

    def matches(self, action: str) -> bool:
        kind, sep, arg = action.strip().partition(":")
        return bool(sep) and kind == self.kind and (self.target == "*" or arg == self.target)

    def text(self) -> str:
        """The rule as a document sentence."""
        verb = next(v for v, k in VERBS.items() if k == self.kind)
        return f"never {verb} {'anything' if self.target == '*' else self.target}"


def parse_policy(document: str) -> list[Rule]:
    """The rules of ``document`` (see the module docstring), in order, without duplicates."""
    rules: list[Rule] = []
    for sentence in document.lower().split("."):
        found = NEVER.match(" ".join(sentence.split()))
        if found is None:
            continue
        verb, targets = found.groups()
        if verb not in VERBS:
            raise ValueError(f"policy sentence {sentence.strip()!r}: unknown verb {verb!r}; expected one of "
                             f"{sorted(VERBS)}")
        for target in re.split(r",|\bor\b|\band\b", targets):
            rule = Rule(VERBS[verb], target.strip())
            if rule.target and all((r.kind, r.target) != (rule.kind, rule.target) for r in rules):
                rules.append(rule)
    return rules


class RuleBase:
    """One task instance's rules: parsed from its document, then updated on violations."""

    def __init__(self, document: str):
        self.rules = parse_policy(document)

    def forbidding(self, action: str) -> list[Rule]:
        """The rules ``action`` breaks."""
        return [rule for rule in self.rules if rule.matches(action)]

    def record_violation(self, action: str) -> bool:
        """Update on a reported violation by ``action``; True when a rule was added."""
        broken = self.forbidding(action)
        for rule in broken:
            rule.violations += 1
        kind, sep, arg = action.strip().partition(":")
        if broken or not sep:
            return False
        self.rules.append(Rule(kind, arg, source="violation", violations=1))
        return True

    def text(self) -> str:
        """The rules as a document."""
        return ". ".join(rule.text() for rule in self.rules)
