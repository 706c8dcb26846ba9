"""``multiplication_trace``: ``"482*37="`` → long multiplication written out, then ``#### 17834``.

The multiplicand ``a`` has exactly ``digits_a`` digits and the multiplier ``b`` exactly ``digits_b`` (the
leading digit is not 0, except for one-digit operands); ``W = digits_a + digits_b`` bounds the product's
digits. For each digit ``m`` of ``b``, least significant first, the trace first restates the multiplier
shifted by the digit's place, ``*B`` with ``B = b div 10**place`` left-padded with zeros to ``digits_b`` digits,
so that ``m`` is its last digit (``*37``, then ``*03``); then it multiplies ``a`` digit by digit, least
significant first: the line of digit ``x`` with incoming carry ``c`` is ``x*m=PP+c=VV k cC`` (the
product ``x·m`` and the value ``v = x·m + c``, each with two digits, the digit kept ``k = v mod 10``, the carry
out ``C = v div 10``: a table fact, then a one-digit addition, rather than one fact of three arguments); then the
partial product ``a·m`` shifted by the digit's place, left-padded with zeros to ``W`` digits, as ``=P``.
With more than one digit in ``b``, the partial products are summed column by column with
``addition_trace``'s writer (``column_sum_lines``: ``p1+p2+...+c=SS k cC``), and the answer follows::

    *37
    2*7=14+0=14 4 c1
    8*7=56+1=57 7 c5
    4*7=28+5=33 3 c3
    =03374
    *03
    2*3=06+0=06 6 c0
    8*3=24+0=24 4 c2
    4*3=12+2=14 4 c1
    =14460
    4+0+0=04 4 c0
    7+6+0=13 3 c1
    3+4+1=08 8 c0
    3+4+0=07 7 c0
    0+1+0=01 1 c0
    #### 17834

The model (rotary positions) finds every digit it copies at a fixed distance back: ``m`` three characters
after the last digit of ``*B`` or one line up, ``*B`` from the previous block's ``*B`` shifted one place (the
first from the prompt), a digit of ``a`` from the same line of the previous block. Without the ``*B`` line the
first product line of the second block is where a warm-started model went wrong, copying the multiplier digit
of the block above.

Every line of a given kind has the same width, so the trace's length depends on the knobs only
(``max_completion_chars`` is exact for a ``W``-digit product). Rewards as ``addition_trace``.
"""
from __future__ import annotations

import random

from pydantic import Field

from polo.tasks.addition_trace import DigitTracedTask, column_line_chars, column_sum_lines, operand
from polo.tasks.base import Example
from polo.tasks.registry import register_task
from polo.tasks.traced import MARKER

PRODUCT_LINE_CHARS = 17
"""Characters of a ``x*m=PP+c=VV k cC`` line, its newline included."""


def partial_product_lines(a: str, m: str) -> tuple[list[str], str]:
    """The lines of ``a × m`` for one digit ``m`` (least significant digit of ``a`` first) and the product's
    digits (``len(a) + 1`` of them: the last carry first, even when it is 0)."""
    lines, kept, carry = [], [], 0
    for x in reversed(a):
        value = int(x) * int(m) + carry
        lines.append(f"{x}*{m}={int(x) * int(m):02d}+{carry}={value:02d} {value % 10} c{value // 10}")
        kept.append(str(value % 10))
        carry = value // 10
    return lines, str(carry) + "".join(reversed(kept))


@register_task("multiplication_trace")
class MultiplicationTrace(DigitTracedTask):
    """Long multiplication with its carries written out; difficulty knobs ``digits_a`` and ``digits_b``."""

    digits_a: int = Field(3, ge=1, le=9)
    """Digits of the multiplicand (exactly)."""
    digits_b: int = Field(2, ge=1, le=9)
    """Digits of the multiplier (exactly): one partial product each."""

    @property
    def width(self) -> int:
        """``W``: digits of the padded partial products, at least those of any product."""
        return self.digits_a + self.digits_b

    @property
    def max_completion_chars(self) -> int:
        partials = self.digits_b * (self.digits_b + 2 + self.digits_a * PRODUCT_LINE_CHARS + self.width + 2)
        total = self.width * column_line_chars(self.digits_b) if self.digits_b > 1 else 0
        return partials + total + len(MARKER) + 1 + self.width

    def sample(self, rng: random.Random) -> Example:
        a, b = operand(rng, self.digits_a), operand(rng, self.digits_b)
        return Example(f"{a}*{b}=", str(a * b))

    def trace(self, example: Example) -> str:
        a, b = example.prompt[:-1].split("*")
        lines, partials = [], []
        for place, m in enumerate(reversed(b)):
            steps, digits = partial_product_lines(a, m)
            partials.append((digits + "0" * place).zfill(self.width))
            lines += [f"*{int(b) // 10**place:0{len(b)}d}", *steps, f"={partials[-1]}"]
        if len(partials) > 1:
            lines += column_sum_lines(partials)[0]
        return "\n".join(lines)
