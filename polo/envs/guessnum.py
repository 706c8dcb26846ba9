"""``GuessNum-v0``: find a hidden number by asking an underspecified user questions."""
from __future__ import annotations

import math
import random
import re

from typing import ClassVar

from pydantic import Field, PrivateAttr

from polo.envs.base import Environment, Transition
from polo.envs.registry import register_environment

CLASSES = ("even", "odd", "prime", "small")
ABOVE = re.compile(r">([1-9][0-9]*)\?")
GUESS = re.compile(r"=([1-9][0-9]*)")


def in_class(value: int, cls: str, n: int) -> bool:
    """Whether ``value`` is even, odd, prime or small (at most ``n / 2``)."""
    if cls == "even":
        return value % 2 == 0
    if cls == "odd":
        return value % 2 == 1
    if cls == "prime":
        return value > 1 and all(value % d for d in range(2, math.isqrt(value) + 1))
    return value <= n / 2


@register_environment("GuessNum-v0")
class GuessNum(Environment):
    """Guess-the-number dialogue: clarify the hidden kind of number, bisect with questions, guess; +1 if right.

    Generation: ``cls = rng.choice(["even", "odd", "prime", "small"])`` (small: at most N/2), then
    ``x = rng.choice`` of the values 1..N of that class, ascending. The opening message
    ``"u: guess my number 1-<N>"`` does not state the class. Actions: ``c?`` → ``"u: it is <cls>"``;
    ``>k?`` → ``"u: yes"`` when x > k else ``"u: no"``; ``=k`` → ``"u: correct"`` (terminal, reward 1) or
    ``"u: wrong"``; k is a number 1..N without leading zeros; anything else → ``"u: ??"`` (``valid`` false).
    Oracles: ``candidates`` (the values still consistent with every answer, ascending), ``ig_bits``
    (log2 of the candidate count before the step minus after) and ``judge_score`` (``ig_bits / log2 N``
    clipped to [0, 1]). The expert asks ``c?`` once, then ``>c?`` with ``c`` the candidate at index
    ``(count - 1) // 2`` until one candidate is left, which it guesses. ``gold`` is x as text (the answer
    probe is ``"=" + gold``). With ``teacher_hints`` a wrong guess is answered ``"u: wrong, hint: ..."``
    (``hint`` oracle 1.0), the template teacher of SOPO ("Socratic-guided Policy Optimization"); with
    ``hint_text`` false the turn is only flagged and the ``socratic`` engine's teacher writes the hint.
    """

    provenance = "RECONSTRUCTED"
    deterministic: ClassVar[bool] = True
    copyable: ClassVar[bool] = True
    probe_prefix: ClassVar[str | None] = "="
    placeholder: ClassVar[str] = "u: ??"

    N: int = Field(16, ge=2, le=999)
    """The number is drawn from 1..N."""
    max_turns: int = Field(6, ge=1)
    """Steps before the episode is truncated."""
    teacher_hints: bool = False
    """A wrong guess is answered with a Socratic teacher hint (``hint`` oracle 1.0) that points at what to
    ask next without giving the number: the kind of number if not yet asked, else a bisecting question."""
    hint_text: bool = True
    """With ``teacher_hints``, write the template hint into the observation; false: only flag the turn (``hint``
    oracle 1.0, observation ``"u: wrong"``) and leave the text to the engine's teacher."""

    _cls: str = PrivateAttr("")
    _x: int = PrivateAttr(0)
    _candidates: list[int] = PrivateAttr(default_factory=list)
    _asked: bool = PrivateAttr(False)

    @property
    def turn_limit(self) -> int:
        return self.max_turns

    @property
    def gold(self) -> str:
        self._check_started()
        return str(self._x)

    def _generate(self, rng: random.Random) -> str:
        self._cls = rng.choice(sorted(CLASSES))
        self._x = rng.choice([v for v in range(1, self.N + 1) if in_class(v, self._cls, self.N)])
        self._candidates, self._asked = list(range(1, self.N + 1)), False
        return f"u: guess my number 1-{self.N}"

    def _transition(self, action: str) -> Transition:
        before = len(self._candidates)
        above, guess = ABOVE.fullmatch(action), GUESS.fullmatch(action)
        k = int((above or guess).group(1)) if above or guess else 0
        if action == "c?":
            self._asked = True
            self._narrow(lambda v: in_class(v, self._cls, self.N))
            out = Transition(f"u: it is {self._cls}", 0.0)
        elif above and k <= self.N:
            yes = self._x > k
            self._narrow(lambda v: (v > k) == yes)
            out = Transition("u: yes" if yes else "u: no", 0.0)
        elif guess and k <= self.N:
            right = k == self._x
            self._narrow(lambda v: (v == k) == right)
            out = Transition("u: correct" if right else "u: wrong" + self._hint(), float(right), terminated=right,
                             success=right)
        else:
            out = Transition("u: ??", 0.0, valid=False)
        bits = math.log2(before) - math.log2(len(self._candidates))
        judge = min(1.0, max(0.0, bits / math.log2(self.N)))
        return out._replace(oracles={"ig_bits": bits, "judge_score": judge, "candidates": tuple(self._candidates),
                                     "hint": float(self.teacher_hints and out.observation.startswith("u: wrong"))})

    def _hint(self) -> str:
        """The template teacher's hint after a wrong guess (empty without ``teacher_hints`` or ``hint_text``)."""
        if not (self.teacher_hints and self.hint_text):
            return ""
        if not self._asked:
            return ", hint: ask about the kind of number"
        return f", hint: ask if it is above {self._candidates[(len(self._candidates) - 1) // 2]}"

    def _narrow(self, keep) -> None:
        self._candidates = [v for v in self._candidates if keep(v)]

    def expert(self) -> str:
        self._check_open()
        if not self._asked:
            return "c?"
        if len(self._candidates) == 1:
            return f"={self._candidates[0]}"
        return f">{self._candidates[(len(self._candidates) - 1) // 2]}?"

    def valid_actions(self) -> list[str]:
        """``c?``, ``>k?`` for k in 1..N-1 and ``=k`` for k in 1..N."""
        return ["c?", *(f">{k}?" for k in range(1, self.N)), *(f"={k}" for k in range(1, self.N + 1))]
