"""``CodeFix-v0``: repair a tiny Python repository by line edits, run its hidden tests, submit."""
from __future__ import annotations

import difflib
import random
import re
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from polo.core.registry import ConfigError
from polo.envs.base import Environment, ProgramTester, Transition
from polo.envs.registry import register_environment

INTENDED = {"add": ("+", "b"), "sub": ("-", "b"), "mul": ("*", "b"), "div": ("//", "b"), "inc": ("+", "1"),
            "dec": ("-", "1"), "dbl": ("*", "2"), "tri": ("*", "3"), "half": ("//", "2"), "third": ("//", "3"),
            "sq": ("*", "a")}
"""The catalog: a function's name states what it computes, ``a <op> <operand>``."""
OPS = ("+", "-", "*", "//")
OPERANDS = ("a", "b", "1", "2", "3")
BODIES = tuple((op, operand) for op in OPS for operand in OPERANDS)
"""Every body an edit can write, in the fixed order of ``valid_actions``."""
TEST_ARGS = ((2, 3), (5, 1), (7, 4))
"""The hidden tests' ``(a, b)`` of every function: any two bodies that differ somewhere on positive integers
differ on one of them (``a+a`` and ``a*2``, ``a*1`` and ``a//1`` are the only equal pairs)."""
EDIT = re.compile(r"([1-9])(\+|-|\*|//)([ab123])")
DISPATCH = "\n\ndef check(name, a, b):\n    return globals()[name](a, b)\n"
"""Appended to the repository for a test run: the sandbox calls ``check(name, a, b)``."""


def evaluate(op: str, operand: str, a: int, b: int) -> int:
    """``a <op> <operand>`` in plain Python (the oracle the sandbox's results agree with)."""
    y = a if operand == "a" else b if operand == "b" else int(operand)
    return a + y if op == "+" else a - y if op == "-" else a * y if op == "*" else a // y


def expected(name: str) -> list[int]:
    """The values the hidden tests of function ``name`` expect, one per ``TEST_ARGS`` pair."""
    return [evaluate(*INTENDED[name], a, b) for a, b in TEST_ARGS]


PASSES = {(name, body): [evaluate(*body, a, b) == want for (a, b), want in zip(TEST_ARGS, expected(name))]
          for name in INTENDED for body in BODIES}
"""Per (function name, body): whether the body passes each hidden test of the function (plain Python)."""


def fixed(name: str, body: tuple[str, str]) -> bool:
    """Whether ``body`` passes every hidden test of function ``name``."""
    return all(PASSES[name, body])


def function_source(name: str, body: tuple[str, str]) -> str:
    return f"def {name}(a, b):\n    return a {body[0]} {body[1]}\n"


@register_environment("CodeFix-v0")
class CodeFix(Environment):
    """A coding agent's task: a file of ``n_funcs`` one-line functions, some buggy; fix them, test, submit.

    The repository is ``def <name>(a, b):`` / ``    return a <op> <operand>`` per function, functions separated
    by one blank line; each name comes from a fixed catalog that states its intended body (``add``: a+b,
    ``sub``: a-b, ``mul``: a*b, ``div``: a//b, ``inc``: a+1, ``dec``: a-1, ``dbl``: a*2, ``tri``: a*3,
    ``half``: a//2, ``third``: a//3, ``sq``: a*a), with op in ``+ - * //`` and operand in ``a b 1 2 3``.
    Generation, in this order from the episode's ``rng``: ``names = rng.sample(catalog names, n_funcs)``; the
    bug count ``k = n_bugs`` or, when that is None, ``rng.randint(1, n_funcs)``; the buggy functions
    ``rng.sample(range(n_funcs), k)`` (then sorted); for each of them in ascending order, its body
    ``rng.choice`` of the 20 bodies (ops then operands, in the order above) that fail one of its hidden tests
    or more. Every function has 3 hidden tests, ``(a, b)`` in ``(2, 3), (5, 1), (7, 4)``, expecting the
    intended body's value.

    Observation: the numbered repository ``"1 add=a-b/2 dbl=a*3/3 inc=a+1"``; after a test run (and at the
    end) the report ``" t:pass"`` or ``" t:fail 1,2"`` (the functions with a failing test) is appended, after
    an invalid action ``" ?"``. Actions: edit commands ``<line><op><operand>`` (``1+b`` sets function 1's body
    to ``a + b``), several joined by ``,`` in one step (each line at most once); ``t`` runs the hidden tests
    (the test-run tool); ``s`` submits (terminal). Anything else is invalid and changes nothing. The reward,
    on submission or truncation (``max_turns``), is the fraction of hidden tests passed, 0 on other steps;
    success is every test passing. Reaching all-pass by an edit does not end the episode: edits run no
    tests, so an edit step costs no sandbox run, and submitting is the agent's decision.

    Tests run the repository (plus a ``check(name, a, b)`` dispatcher) in the code sandbox the environment is
    built with (``make(config, sandbox=tester)``; the environment task gives polo.tasks.environment's
    ``sandbox_tester``, whose cache runs each distinct source once per process), or with ``runner: python`` in
    plain Python (the same results, no process; for tests and benchmarks).

    ``info`` per step: ``subdiffs``, the sub-diffs of DiDPO ("Diff-in-Diff Policy Optimization", coding
    agents: a step's diff split into changed line ranges whose recurrence across rollouts forms advantage
    groups), lists for each ``difflib.SequenceMatcher`` opcode other than ``equal`` between the source lines
    before and after the step (each line paired with the function it belongs to, so that equal bodies of
    different functions never align), ``{"start", "end"}`` (the
    0-based line range ``[start, end)`` in the new source), ``{"old_start", "old_end"}`` (the same in the old
    source), ``type`` (``replace``/``insert``/``delete``), ``old`` and ``new`` (the range's lines joined by
    newlines), ``span`` (``[c0, c1]``: the character range of the action's edit commands that changed lines
    of the range) and ``origin`` (``"root"``); empty for tests, submissions, invalid actions and edits that
    change nothing. The file's lines never move, so every sub-diff here is a one-line ``replace`` of a body
    (bodies are three lines apart: two commands never share a range). Steps that ran the tests also give
    ``n_tests`` and ``passed``. The expert writes every
    buggy function's fix in one action (commands by line, as many as fit in ``max_action_chars``), then
    submits; ``gold`` is that fix action in the initial state.
    """

    provenance = "RECONSTRUCTED"
    deterministic: ClassVar[bool] = True
    copyable: ClassVar[bool] = True
    max_action_chars: ClassVar[int] = 16
    """Four edit commands (three with ``//``)."""
    runs_programs: ClassVar[bool] = True

    n_funcs: int = Field(3, ge=1, le=9)
    """Functions in the repository (one-digit line numbers; at most 9, all distinct catalog names)."""
    n_bugs: int | None = Field(None, ge=1)
    """Buggy functions per episode (at most ``n_funcs``); None draws 1..n_funcs uniformly."""
    max_turns: int = Field(4, ge=1)
    """Steps before the episode is truncated (and scored)."""
    runner: Literal["sandbox", "python"] = "sandbox"
    """Where the hidden tests run: the code sandbox, or plain Python (identical results)."""

    _sandbox: ProgramTester | None = PrivateAttr(None)
    _names: list[str] = PrivateAttr(default_factory=list)
    _bodies: list[tuple[str, str]] = PrivateAttr(default_factory=list)
    _gold: str = PrivateAttr("")

    def __init__(self, sandbox: ProgramTester | None = None, **knobs: Any):
        """``sandbox`` runs the hidden tests with ``runner: sandbox`` (required then; unused with ``python``)."""
        super().__init__(**knobs)
        if sandbox is not None and not callable(sandbox):
            raise ConfigError(f"environment CodeFix-v0: sandbox must be a program tester (a callable given by the "
                              f"environment's builder, not a knob), got {sandbox!r}")
        if sandbox is None and self.runner == "sandbox":
            raise ConfigError("environment CodeFix-v0 runs its hidden tests in a code sandbox (runner: sandbox) but "
                              "was built without one: build it with make(config, sandbox=tester) (the environment "
                              "task passes polo.tasks.environment.sandbox_tester) or set runner: python")
        self._sandbox = sandbox

    @model_validator(mode="after")
    def _bugs_fit(self) -> "CodeFix":
        if self.n_bugs is not None and self.n_bugs > self.n_funcs:
            raise ValueError(f"n_bugs={self.n_bugs} exceeds n_funcs={self.n_funcs}: expected 1..n_funcs or null")
        return self

    @property
    def turn_limit(self) -> int:
        return self.max_turns

    @property
    def gold(self) -> str:
        """The expert's fix action in the initial state (e.g. ``"1+b,3+1"``)."""
        self._check_started()
        return self._gold

    @property
    def source(self) -> str:
        """The repository's current Python source."""
        self._check_started()
        return "\n".join(function_source(n, b) for n, b in zip(self._names, self._bodies))

    def _generate(self, rng: random.Random) -> str:
        self._names = rng.sample(list(INTENDED), self.n_funcs)
        self._bodies = [INTENDED[name] for name in self._names]
        k = self.n_bugs if self.n_bugs is not None else rng.randint(1, self.n_funcs)
        for i in sorted(rng.sample(range(self.n_funcs), k)):
            self._bodies[i] = rng.choice([b for b in BODIES if not fixed(self._names[i], b)])
        self._gold = self._fix_action()
        return self._repo()

    def _repo(self) -> str:
        return "/".join(f"{i + 1} {n}=a{op}{operand}" for i, (n, (op, operand)) in enumerate(zip(self._names,
                                                                                                  self._bodies)))

    def _transition(self, action: str) -> Transition:
        final = action == "s" or self._t >= self.turn_limit  # submitted, or truncated after this step
        edits = [] if action in ("s", "t") else self._parse(action)
        subdiffs, suffix = [], "" if edits is not None else " ?"
        if edits:
            before = self.source
            for _, line, body in edits:
                self._bodies[line] = body
            subdiffs = self._subdiffs(before, self.source, edits)
        if action == "t" or final:
            return self._tested(subdiffs, final, suffix, terminated=action == "s", valid=edits is not None)
        return Transition(self._repo() + suffix, 0.0, valid=edits is not None, oracles={"subdiffs": subdiffs})

    def _parse(self, action: str) -> list[tuple[tuple[int, int], int, tuple[str, str]]] | None:
        """The edit commands of ``action`` as ((c0, c1) character span, 0-based line, body); None when any
        command is malformed, names a line past ``n_funcs``, or a line is edited twice."""
        edits, offset = [], 0
        for command in action.split(","):
            m = EDIT.fullmatch(command)
            if m is None or int(m[1]) > self.n_funcs:
                return None
            edits.append(((offset, offset + len(command)), int(m[1]) - 1, (m[2], m[3])))
            offset += len(command) + 1
        lines = [line for _, line, _ in edits]
        return edits if len(set(lines)) == len(lines) else None

    def _subdiffs(self, before: str, after: str, edits) -> list[dict[str, Any]]:
        """The changed line ranges between ``before`` and ``after`` with the action span of the commands that
        wrote them (function i's body is source line 3i + 1). Lines are matched together with the function
        they belong to, so that equal bodies of different functions never align (a plain line diff of
        ``1-1,2*b,3//2`` on bodies ``a*b, a//2, a-1`` would shift them and report inserts and deletes)."""
        old, new = before.split("\n"), after.split("\n")
        owner = [self._names[min(k // 3, self.n_funcs - 1)] for k in range(len(old))]
        matcher = difflib.SequenceMatcher(None, list(zip(owner, old)), list(zip(owner, new)), autojunk=False)
        out = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            spans = [span for span, line, _ in edits if i1 <= 3 * line + 1 < max(i2, i1 + 1)
                     or j1 <= 3 * line + 1 < max(j2, j1 + 1)]
            out.append({"start": j1, "end": j2, "old_start": i1, "old_end": i2, "type": tag,
                        "old": "\n".join(old[i1:i2]), "new": "\n".join(new[j1:j2]),
                        "span": [min(s[0] for s in spans), max(s[1] for s in spans)], "origin": "root"})
        return out

    def _tested(self, subdiffs: list, final: bool, suffix: str, terminated: bool, valid: bool) -> Transition:
        """Run the hidden tests: the observation gets the report; on the last step the reward is the pass
        fraction (0 before)."""
        results = self._run_tests()
        failing = [str(i + 1) for i, r in enumerate(results) if not all(r)]
        passed, n = sum(map(sum, results)), sum(map(len, results))
        report = " t:pass" if not failing else " t:fail " + ",".join(failing)
        return Transition(self._repo() + suffix + report, passed / n if final else 0.0, terminated=terminated,
                          success=final and not failing, valid=valid,
                          oracles={"subdiffs": subdiffs, "n_tests": n, "passed": passed})

    def _run_tests(self) -> list[list[bool]]:
        """Per function, whether each of its hidden tests passed."""
        if self.runner == "python":
            return [PASSES[n, b] for n, b in zip(self._names, self._bodies)]
        tests = tuple(((n, a, b), want) for n in self._names for (a, b), want in zip(TEST_ARGS, expected(n)))
        flat = self._sandbox(self.source + DISPATCH, tests, "check")
        k = len(TEST_ARGS)
        return [flat[i * k:(i + 1) * k] for i in range(self.n_funcs)]

    def _fix_action(self) -> str:
        """Fix commands of the functions that fail a test, by line, as many as fit in ``max_action_chars``."""
        action = ""
        for i, (name, body) in enumerate(zip(self._names, self._bodies)):
            command = f"{i + 1}{''.join(INTENDED[name])}"
            joined = f"{action},{command}" if action else command
            if not fixed(name, body) and len(joined) <= self.max_action_chars:
                action = joined
        return action

    def expert(self) -> str:
        self._check_open()
        return self._fix_action() or "s"

    def valid_actions(self) -> list[str]:
        """Every single edit (lines, then ops, then operands), ``t``, ``s``, then the multi-edit actions that
        set one line to any body and fix every other buggy line (partly right fixes), without repeats."""
        singles = [f"{i + 1}{op}{operand}" for i in range(self.n_funcs) for op, operand in BODIES]
        fixes = {i: f"{i + 1}{''.join(INTENDED[n])}" for i, (n, b) in enumerate(zip(self._names, self._bodies))
                 if not fixed(n, b)}
        combos = [",".join(c for _, c in sorted({**fixes, i: f"{i + 1}{op}{operand}"}.items()))
                  for i in range(self.n_funcs) for op, operand in BODIES]
        combos = [c for c in combos if len(c) <= self.max_action_chars]
        return list(dict.fromkeys(singles + ["t", "s"] + combos))
