"""A small recursive-descent evaluator for model-written arithmetic (never ``eval``).

Grammar (whitespace ignored)::

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := INTEGER | "(" expr ")"
    INTEGER := "0" | [1-9][0-9]*

Only non-negative integer literals written without leading zeros (``03`` is not ``3``), the four operators and parentheses are accepted: names, ``**``,
unary minus, decimals and any other character are rejected. Division must be exact and by a non-zero
value, so every value is an integer. ``evaluate`` returns the value and the integer literals used.
"""
from __future__ import annotations

import re

MAX_LENGTH = 512
MAX_DEPTH = 32
_TOKEN = re.compile(r"[0-9]+|\S")
_OPERATORS = frozenset("+-*/()")


class ExpressionError(ValueError):
    """The text is not a valid expression, or it divides by zero or not exactly."""


def tokenize(text: str) -> list[str]:
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_LENGTH} characters")
    tokens = _TOKEN.findall(text)
    for token in tokens:
        if not token.isascii() or not (token.isdigit() or token in _OPERATORS):
            raise ExpressionError(f"unexpected character {token!r}")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens, self.pos, self.depth, self.numbers = tokens, 0, 0, []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ExpressionError("unexpected end of expression")
        self.pos += 1
        return token

    def expr(self) -> int:
        value = self.term()
        while self.peek() in ("+", "-"):
            op, right = self.take(), self.term()
            value = value + right if op == "+" else value - right
        return value

    def term(self) -> int:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op, right = self.take(), self.factor()
            if op == "*":
                value *= right
            elif right == 0:
                raise ExpressionError("division by zero")
            elif value % right:
                raise ExpressionError(f"inexact division {value}/{right}")
            else:
                value //= right
        return value

    def factor(self) -> int:
        token = self.take()
        if token.isdigit():
            if len(token) > 1 and token[0] == "0":
                raise ExpressionError(f"number with a leading zero {token!r}")
            self.numbers.append(int(token))
            return int(token)
        if token != "(":
            raise ExpressionError(f"expected a number or '(', got {token!r}")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExpressionError(f"parentheses nested deeper than {MAX_DEPTH}")
        value = self.expr()
        if self.take() != ")":
            raise ExpressionError("expected ')'")
        self.depth -= 1
        return value


def evaluate(text: str) -> tuple[int, list[int]]:
    """``(value, integer literals in order of appearance)``; ExpressionError if invalid."""
    parser = _Parser(tokenize(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected {parser.peek()!r} after the expression")
    return value, parser.numbers
