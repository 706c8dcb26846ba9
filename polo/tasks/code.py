"""``code``: write the body of an unknown function from a few input → output examples; hidden unit tests judge it.

Prompt ``"f(1)=5 f(2)=8 f(3)=11 | def f(x): return "``, a correct completion ``"3*x+2"``: the task assembles the
program ``def f(x):\\n    return <completion>\\n`` and runs it in the sandbox (``polo.tasks.sandbox``) on the
hidden tests, other inputs whose expected outputs the task computes from the true function and compares in this
process (the program never sees them). A completion that is not one Python expression fails every test without
running.

Functions come from ``families``, on inputs ``x`` in ``0..max_input``: ``linear`` ``a*x+b`` (``a`` in
``1..max_coef``, ``b`` in ``0..max_const``), ``square`` ``x*x+b`` (``b`` in ``0..max_const``), ``div`` ``x//a``
and ``mod`` ``x%a`` (``a`` in ``2..max_coef``), ``min`` ``min(x,c)`` and ``max`` ``max(x,c)`` (``c`` in
``1..max_const``). ``shown`` distinct inputs are drawn until no other function of the task's space agrees with
the true one on all of them, so the examples determine the answer; ``tests`` other inputs are hidden. A wrong function usually agrees on some hidden inputs (``min(x,5)`` and ``min(x,6)`` below 5),
which is the per-test partial credit VeRPO-style estimators read from the ``test_results`` input.

Rewards: ``correct`` (1.0 iff every hidden test passes: ``is_correct``) and ``tests_passed`` (the fraction passed);
defaults ``correct`` 1.0 and ``tests_passed`` 0.5. Columns: ``inputs`` (the hidden argument tuples), ``outputs``
(their expected values). Each distinct program of a batch runs once (``polo.tasks.sandbox.check_programs``' cache
serves the rewards, the verifier and the ``test_results`` input alike).
"""
from __future__ import annotations

import ast
import random
import warnings
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from polo.core.registry import ConfigError
from polo.tasks.base import Example, Task
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardFn, RewardSpec, completion_texts
from polo.tasks.sandbox import ProgramTests, SandboxLimits, check_programs

Family = Literal["linear", "square", "div", "mod", "min", "max"]
FAMILIES: tuple[Family, ...] = ("linear", "square", "div", "mod", "min", "max")
MAX_COMPLETION = 1000
"""Completions longer than this fail without running."""


def linear_text(a: int, b: int) -> str:
    return ("x" if a == 1 else f"{a}*x") + (f"+{b}" if b else "")


def function_space(families: Sequence[str], max_coef: int, max_const: int) -> list[tuple[str, str, Callable]]:
    """Every function of the chosen families: (family, canonical body, function)."""
    space: list[tuple[str, str, Callable]] = []
    for family in families:
        if family == "linear":
            space += [(family, linear_text(a, b), lambda x, a=a, b=b: a * x + b)
                      for a in range(1, max_coef + 1) for b in range(max_const + 1)]
        elif family == "square":
            space += [(family, f"x*x+{b}" if b else "x*x", lambda x, b=b: x * x + b) for b in range(max_const + 1)]
        elif family == "div":
            space += [(family, f"x//{a}", lambda x, a=a: x // a) for a in range(2, max_coef + 1)]
        elif family == "mod":
            space += [(family, f"x%{a}", lambda x, a=a: x % a) for a in range(2, max_coef + 1)]
        else:  # min, max
            op = min if family == "min" else max
            space += [(family, f"{family}(x,{c})", lambda x, c=c, op=op: op(x, c)) for c in range(1, max_const + 1)]
    return space


def program(completion: str) -> str | None:
    """The program for a completion (``def f(x): return <completion>``), or None when the completion is not a
    single Python expression (or is longer than ``MAX_COMPLETION``)."""
    body = completion.strip()
    if not body or len(body) > MAX_COMPLETION:
        return None
    try:
        with warnings.catch_warnings():  # "invalid decimal literal" and the like: a completion is no code of ours
            warnings.simplefilter("ignore", SyntaxWarning)
            ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return f"def f(x):\n    return {body}\n"


@register_task("code")
class Code(Task):
    """Function-writing problems with hidden unit tests run in the sandbox; difficulty knobs ``families``,
    ``max_coef``, ``max_const``, ``shown``, ``tests``."""

    default_rewards: ClassVar[list[RewardSpec]] = [RewardSpec("correct", 1.0), RewardSpec("tests_passed", 0.5)]

    families: list[Family] = Field(default_factory=lambda: list(FAMILIES), min_length=1)
    """Function families drawn uniformly: ``linear``, ``square``, ``div``, ``mod``, ``min``, ``max``."""
    max_coef: int = Field(5, ge=2, le=9)
    """Largest multiplier (``linear``) and divisor (``div``, ``mod``)."""
    max_const: int = Field(9, ge=1, le=99)
    """Largest added constant (``linear``, ``square``) and bound (``min``, ``max``)."""
    max_input: int = Field(12, ge=3, le=99)
    """Inputs, shown and hidden, are drawn from ``0..max_input`` (the default 12 gives about 13k distinct
    prompts, enough for a 5000-problem training pool)."""
    shown: int = Field(3, ge=1, le=8)
    """Input → output examples in the prompt."""
    tests: int = Field(5, ge=1, le=32)
    """Hidden unit tests per problem (inputs not shown)."""
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)
    """How the programs run (``polo.tasks.sandbox``: isolation mode and limits)."""
    concurrency: int | None = Field(None, ge=1)
    """Programs run at once when a batch is scored; None: the usable CPUs."""

    _space: list = PrivateAttr(default_factory=list)
    _signatures: list = PrivateAttr(default_factory=list)
    _agreeing: list = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Code:
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"families must be distinct, got {self.families}")
        if self.shown + self.tests > self.max_input + 1:
            raise ValueError(f"shown ({self.shown}) + tests ({self.tests}) distinct inputs do not fit in "
                             f"0..max_input ({self.max_input}); raise max_input or lower them")
        self._space = function_space(self.families, self.max_coef, self.max_const)
        self._signatures = [tuple(fn(x) for x in range(self.max_input + 1)) for _, _, fn in self._space]
        # _agreeing[x][y]: the distinct signatures (functions on 0..max_input) with value y at input x
        self._agreeing = [{} for _ in range(self.max_input + 1)]
        for signature in set(self._signatures):
            for x, y in enumerate(signature):
                self._agreeing[x].setdefault(y, set()).add(signature)
        return self

    @property
    def max_completion_chars(self) -> int:
        return max(len(text) for _, text, _ in self._space)

    def sample(self, rng: random.Random) -> Example:
        """A function of a uniformly drawn family, ``shown`` inputs that single it out in the task's space (no
        other function with other values on ``0..max_input`` agrees on all of them) and ``tests`` hidden ones."""
        domain, n = range(self.max_input + 1), self.shown + self.tests
        for _ in range(100):
            family = rng.choice(self.families)
            k = rng.choice([i for i, entry in enumerate(self._space) if entry[0] == family])
            values = self._signatures[k]
            for _ in range(20):
                inputs = rng.sample(domain, n)
                shown = sorted(inputs[: self.shown])
                if len(set.intersection(*(self._agreeing[x][values[x]] for x in shown))) == 1:
                    _, text, fn = self._space[k]
                    hidden = inputs[self.shown:]
                    prompt = " ".join(f"f({x})={fn(x)}" for x in shown) + " | def f(x): return "
                    return Example(prompt, text, {"inputs": tuple((x,) for x in hidden),
                                                  "outputs": tuple(fn(x) for x in hidden)})
        raise ConfigError(f"task code: {self.shown} shown examples rarely single out a function of {self.families} "
                          f"on 0..{self.max_input}; raise task.shown")

    def test_results(self, completions: Sequence, examples: Sequence[Example]) -> list[list[bool]]:
        """Per completion, whether each hidden test of its example passed (see ``run_tests``)."""
        return self.run_tests(completions, [e.columns["inputs"] for e in examples],
                              [e.columns["outputs"] for e in examples])

    def run_tests(self, completions: Sequence, inputs: Sequence, outputs: Sequence) -> list[list[bool]]:
        """Per completion, whether its program returns ``outputs[i][j]`` for ``inputs[i][j]``; a completion that is
        no expression fails all its tests without running. Distinct programs run concurrently, each once while
        the sandbox's result cache holds it."""
        jobs, rows = [], []
        for completion, args, expected in zip(completion_texts(completions), inputs, outputs):
            source = program(completion)
            rows.append((source, len(expected), len(jobs)))
            if source is not None:
                jobs.append(ProgramTests(source, tuple(zip(map(tuple, args), expected))))
        results = check_programs(jobs, self.sandbox, self.concurrency)
        return [results[i] if source is not None else [False] * n for source, n, i in rows]

    def verify(self, completions: Sequence[str], examples: Sequence[Example]) -> list[bool]:
        return [all(r) for r in self.test_results(completions, examples)]

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.verify([completion], [example])[0]

    def correct_reward(self, prompts: list, completions: list, inputs: list, outputs: list, **kwargs) -> list[float]:
        """Reward ``correct``: 1.0 iff every hidden test passes."""
        return [float(all(r)) for r in self.run_tests(completions, inputs, outputs)]

    def tests_passed_reward(self, prompts: list, completions: list, inputs: list, outputs: list,
                            **kwargs) -> list[float]:
        """Reward ``tests_passed``: the fraction of hidden tests passed."""
        return [sum(r) / len(r) if r else 0.0 for r in self.run_tests(completions, inputs, outputs)]

    def task_rewards(self) -> dict[str, RewardFn]:
        return {"correct": self.correct_reward, "tests_passed": self.tests_passed_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {"correct": 1.0, "tests_passed": 1.0}
