"""``countdown_trace``: countdown (``polo.tasks.countdown``) with the search written out before the answer.

The prompt is countdown's (``"3 5 7>56:"``); the demonstration is a depth-first search over "pick two numbers
of the current list, combine them with ``+ - *`` or an exact ``/``", written one step per line (Stream of
Search: Learning to Search in Language, arXiv:2404.03683), then the expression it found after ``####``::

    7-3=4 [4,5]
     5*4=20 [20] x
     5+4=9 [9] x
    5*7=35 [3,35]
     35+3=38 [38]
    #### 5*7+3

(prompt ``"3 5 7>38:"``, ``dead_ends=2``). A step ``x op y=r [list]`` combines two numbers ``x, y`` of its
parent's list (the prompt's numbers for an unindented line, else the nearest line above indented one space
less) and writes the sorted list that results; a step the search goes no further from (a list of one number
that is not the target, or a list whose every move was skipped) ends in `` x`` (a dead end), and the search
backtracks to the next line's parent. The search stops on the step whose result
is the target; the answer rebuilds that path as one expression, which countdown's verifier checks (value ==
target, each given number used at most once).

The solver: at each list it tries every distinct move on a pair ``x <= y`` (``x+y``; ``x*y`` and ``y/x`` when
``x > 1``, the latter when exact; ``y-x`` when positive; moves that keep a number unchanged or give 0 are
pruned; so is a move to a list of two or more numbers searched before, which failed) in an order shuffled by
a generator seeded with a hash of the prompt, so the search is deterministic given the example. The demonstration is the tail of that search: the last ``dead_ends`` dead ends before the
solution (all of them when there are fewer), each written from where it leaves the lines above (the first
from the prompt's numbers). Problems drawn by countdown's sampler whose target is one of the numbers (no search)
or that this solver cannot reach (only through a zero or negative intermediate) are drawn again.

Knobs: ``count``, ``max_value`` (countdown's) and ``dead_ends``. Rewards: TracedTask's (``correct`` by
countdown's verifier, default; ``format``).
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from itertools import combinations

from pydantic import Field

from polo.tasks.base import Example
from polo.tasks.countdown import draw_countdown, value_of
from polo.tasks.registry import register_task
from polo.tasks.traced import TracedTask

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 3


@dataclass(frozen=True)
class Step:
    """One written step: ``x op y = result`` at ``depth``, leaving the sorted list ``after``."""

    depth: int
    x: int
    op: str
    y: int
    result: int
    after: tuple[int, ...]
    dead: bool

    def line(self) -> str:
        return (" " * self.depth + f"{self.x}{self.op}{self.y}={self.result} [{','.join(map(str, self.after))}]"
                + (" x" if self.dead else ""))


def moves(numbers: tuple[int, ...]) -> list[tuple[int, str, int, int]]:
    """Distinct useful moves ``(x, op, y, result)`` on a sorted list (module docstring)."""
    out = []
    for a, b in sorted(set(combinations(numbers, 2))):
        out.append((a, "+", b, a + b))
        if a > 1:
            out.append((a, "*", b, a * b))
        if b > a:
            out.append((b, "-", a, b - a))
        if a > 1 and b % a == 0:
            out.append((b, "/", a, b // a))
    return out


def search(numbers: tuple[int, ...], target: int, rng: random.Random) -> list[Step] | None:
    """The depth-first search's steps, up to and including the one whose result is ``target``; None when no
    sequence of moves reaches it. A move to a list of two or more numbers that was already searched (and so
    failed) is skipped unwritten; a step with nothing written after it (a list of one number, or one whose
    every move was skipped) is a dead end."""
    steps: list[Step] = []
    searched: set[tuple[int, ...]] = set()

    def descend(current: tuple[int, ...], depth: int) -> bool:
        searched.add(current)
        options = moves(current)
        rng.shuffle(options)
        for x, op, y, result in options:
            rest = list(current)
            rest.remove(x)
            rest.remove(y)
            after = tuple(sorted(rest + [result]))
            if after in searched and result != target:
                continue
            steps.append(Step(depth, x, op, y, result, after, result != target and len(after) == 1))
            count = len(steps)
            if result == target or (not steps[-1].dead and descend(after, depth + 1)):
                return True
            if len(steps) == count:  # every move on from ``after`` was skipped: a dead end too
                steps[-1] = replace(steps[-1], dead=True)
        return False

    return steps if descend(tuple(sorted(numbers)), 0) else None


def branch(steps: list[Step], i: int) -> list[Step]:
    """Step ``i`` of a search preceded by its ancestors (the latest earlier step at each smaller depth)."""
    out = [steps[i]]
    for s in reversed(steps[:i]):
        if s.depth < out[-1].depth:
            out.append(s)
    return out[::-1]


def written(steps: list[Step], dead_ends: int) -> list[Step]:
    """The tail of a search that holds its last ``dead_ends`` dead ends (all when it has fewer): from the first
    kept dead end on, preceded by that dead end's ancestors."""
    dead = [i for i, s in enumerate(steps) if s.dead]
    if len(dead) <= dead_ends:
        return steps
    start = dead[len(dead) - dead_ends] if dead_ends else len(steps) - 1
    return branch(steps, start)[:-1] + steps[start:]


def expression(numbers: tuple[int, ...], path: list[Step]) -> str:
    """The expression the steps of ``path`` build from ``numbers`` (minimal parentheses)."""
    pool = [(n, str(n), _ATOM) for n in numbers]

    def take(value: int) -> tuple[int, str, int]:
        return pool.pop(next(i for i, item in enumerate(pool) if item[0] == value))

    for s in path:
        (_, left, lp), (_, right, rp) = take(s.x), take(s.y)
        p = _PRECEDENCE[s.op]
        left = f"({left})" if lp < p else left
        right = f"({right})" if rp < p or (rp == p and s.op in "-/") else right
        pool.append((s.result, f"{left}{s.op}{right}", p))
    return pool[-1][1]


def prompt_rng(prompt: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.blake2b(prompt.encode(), digest_size=8).digest(), "big"))


@register_task("countdown_trace")
class CountdownTrace(TracedTask):
    """Countdown with a written depth-first search; knobs ``count``, ``max_value``, ``dead_ends``."""

    count: int = Field(3, ge=2, le=6)
    """How many numbers the prompt gives."""
    max_value: int = Field(9, ge=1, le=999)
    """Largest given number (numbers are drawn from ``1..max_value``)."""
    dead_ends: int = Field(2, ge=0, le=64)
    """Most dead ends the demonstration writes before the solution path."""

    def solve(self, prompt: str, numbers: tuple[int, ...], target: int) -> tuple[list[Step], list[Step]] | None:
        """(written steps, solution path) of the prompt's seeded search; None if it finds no solution."""
        steps = search(numbers, target, prompt_rng(prompt))
        return None if steps is None else (written(steps, self.dead_ends), branch(steps, len(steps) - 1))

    def sample(self, rng: random.Random) -> Example:
        while True:
            drawn = draw_countdown(rng, self.count, self.max_value)
            numbers, target = drawn.columns["numbers"], int(drawn.answer)
            solved = None if target in numbers else self.solve(drawn.prompt, numbers, target)
            if solved is not None:
                return Example(drawn.prompt, expression(numbers, solved[1]), {"numbers": numbers, "target": target})

    def trace(self, example: Example) -> str:
        steps, _ = self.solve(example.prompt, example.columns["numbers"], example.columns["target"])
        return "\n".join(s.line() for s in steps)

    def answer_correct(self, answer: str, example: Example) -> bool:
        return value_of(answer, example.columns["numbers"]) == example.columns["target"]

    @property
    def max_completion_chars(self) -> int:
        return countdown_trace_bound(self.count, self.max_value, self.dead_ends)


def countdown_trace_bound(count: int, max_value: int, dead_ends: int) -> int:
    """An upper bound on the demonstration's length.

    A value built from ``j`` given numbers is at most ``B**j`` with ``B = max(max_value, 2)`` (``a + b <= a*b``
    for ``a, b >= 2``; ``-`` and ``/`` only shrink), so it has at most ``D(j) = len(str(B**j))`` digits. A line
    at depth ``d`` combines two values of ``j1 + j2 <= d + 2`` numbers and writes a list that splits all
    ``count`` numbers into ``count - d - 1`` values. Every written line lies on the branch of one of the at
    most ``dead_ends + 1`` written leaves (the dead ends and the solution), so a depth has at most
    ``dead_ends + 1`` lines. The answer has at most ``count`` numbers, ``count - 1`` operators and
    ``count - 2`` pairs of parentheses.
    """
    base = max(max_value, 2)

    def digits(j: int) -> int:
        return len(str(base**j))

    def split(n: int, parts: int) -> int:  # most digits of ``parts`` values built from ``n`` numbers
        if parts == 1:
            return digits(n)
        return max(digits(j) + split(n - j, parts - 1) for j in range(1, n - parts + 2))

    lines = 0
    for d in range(count - 1):
        combined = max(digits(a) + digits(b) + digits(a + b)
                       for a in range(1, d + 2) for b in range(1, d + 3 - a))
        size = count - d - 1
        lines += d + combined + 2 + 2 + split(count, size) + (size - 1) + 1 + 1
    answer = count * len(str(max_value)) + (count - 1) + 2 * max(count - 2, 0)
    return (dead_ends + 1) * lines + 2 * dead_ends + len("#### ") + answer
