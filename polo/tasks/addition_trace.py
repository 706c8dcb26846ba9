"""``addition_trace``: ``"4827+3956="`` → a column-by-column trace, then ``#### 8783``.

Both operands have exactly ``digits`` digits (``10**(digits-1) .. 10**digits - 1``; ``0 .. 9`` when
``digits`` is 1), so every prompt has the same layout and every trace the same number of lines. The trace
adds the columns from the least significant one; the line of a column with digits ``x, y`` and incoming
carry ``c`` is ``x+y+c=SS k cC``: the column sum ``s = x + y + c`` written with two digits, the digit
kept ``k = s mod 10`` and the carry out ``C = s div 10`` (the next line's incoming carry)::

    7+6+0=13 3 c1
    2+5+1=08 8 c0
    8+9+0=17 7 c1
    4+3+1=08 8 c0
    #### 8783

The answer is the kept digits read from the last line to the first, after the last carry when it is 1.
Every line has the same width, so a demonstration is ``14·digits + 5 + len(answer)`` characters.

Rewards: ``correct`` (default) and ``format`` of ``TracedTask``, and ``digit_match`` on the final answer
(the registered ``digit_match`` applied to the text after ``####``; 0.0 without the marker).
"""
from __future__ import annotations

import random
from pydantic import Field

from polo.tasks.base import Example
from polo.tasks.registry import register_task
from polo.tasks.rewards import completion_texts, position_match
from polo.tasks.traced import MARKER, TracedTask, final_answer


def column_sum_lines(operands: list[str]) -> tuple[list[str], str]:
    """Column-by-column sum of equal-width digit strings: one line per column (least significant first),
    ``d1+d2+...+c=SS k cC`` (the column's digits, the incoming carry, the two-digit column sum, the digit
    kept, the carry out), and the total's digits (the kept digits, most significant first, after the last
    carry when it is not 0; leading zeros of the operands are kept). At most 10 operands, so that every
    column sum has two digits and every carry one."""
    if not operands or not 1 <= len(operands) <= 10 or len({len(x) for x in operands}) != 1:
        raise ValueError(f"column_sum_lines needs 1 to 10 digit strings of one width, got {operands!r}")
    lines, kept, carry = [], [], 0
    for column in range(len(operands[0]) - 1, -1, -1):
        digits = [x[column] for x in operands]
        total = sum(map(int, digits)) + carry
        lines.append(f"{'+'.join(digits)}+{carry}={total:02d} {total % 10} c{total // 10}")
        kept.append(str(total % 10))
        carry = total // 10
    return lines, (str(carry) if carry else "") + "".join(reversed(kept))


def column_line_chars(operands: int) -> int:
    """Characters of one ``column_sum_lines`` line of ``operands`` operands, its newline included."""
    return 2 * operands + 10


def operand(rng: random.Random, digits: int) -> int:
    """A number of exactly ``digits`` digits (``0 .. 9`` for one digit)."""
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


class DigitTracedTask(TracedTask):
    """A traced task with a numeric answer: adds ``digit_match`` on the final answer (not a default reward)."""

    def digit_match_reward(self, prompts: list[str], completions: list, answer: list[str], **kwargs) -> list[float]:
        """Reward ``digit_match``: the answer after ``####`` matched digit by digit with the reference from the
        least significant digit (``polo.tasks.rewards.position_match``); 0.0 without the marker."""
        return [position_match(final_answer(c) or "", a, from_right=True)
                for c, a in zip(completion_texts(completions), answer)]

    def task_rewards(self):
        return {**super().task_rewards(), "digit_match": self.digit_match_reward}

    def reward_maxima(self) -> dict[str, float]:
        return {**super().reward_maxima(), "digit_match": 1.0}


@register_task("addition_trace")
class AdditionTrace(DigitTracedTask):
    """Addition with its carries written out; difficulty knob ``digits`` (digits of each operand)."""

    digits: int = Field(3, ge=1, le=16)
    """Digits of each operand (exactly: the leading digit is not 0, except for one-digit operands)."""

    @property
    def max_completion_chars(self) -> int:
        return self.digits * column_line_chars(2) + len(MARKER) + 1 + self.digits + 1

    def sample(self, rng: random.Random) -> Example:
        a, b = operand(rng, self.digits), operand(rng, self.digits)
        return Example(f"{a}+{b}=", str(a + b))

    def trace(self, example: Example) -> str:
        a, b = example.prompt[:-1].split("+")
        return "\n".join(column_sum_lines([a, b])[0])
