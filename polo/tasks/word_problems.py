"""``word_problems``: short GSM8K-style arithmetic stories with irrelevant sentences mixed in.

The format follows GSM8K, Training Verifiers to Solve Math Word Problems (arXiv:2110.14168): a story,
a question, a worked solution of one computation per line, the answer after ``####``::

    Ann has 7 pears. Ann gets 3 boxes of 4. Bob has 7 cups. Ann eats 5. How many pears does Ann have?
    ---
    3*4=12
    7+12=19
    19-5=14
    #### 14

A story follows one person (the hero) and one kind of item, drawn from a few families (fruit, cards,
coins), each with its own verbs. It opens with the hero's count (``has n`` or ``has k boxes of m``, the
latter one product) and changes it with sentences until it implies ``ops`` computations: gain ``x+j``,
loss ``x-j``, ``now has k times as many`` ``x*k``, ``keeps 1/p of them`` ``x/p`` (exact), and boxes gained
or given away (``k*m`` then ``x+k*m`` or ``x-k*m``: two computations). Every value the trace writes,
operands and results, is an integer in ``1 .. max_value``; factors, divisors and box sizes are 2..9.
``distractors`` sentences, inserted anywhere, state quantities that do not bear on the question: another
person's count of the same item or of something else, a price. The trace writes the computations in the
order of the story, so the answer is the value of the last one.

The answer is a non-negative integer written plainly: ``answer_correct`` accepts ``0`` or digits without a
leading zero whose value is the answer (``019``, ``+19``, ``19.0`` and ``19 pears`` are wrong). Rewards are
``TracedTask``'s. The split is by hash of the prompt.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pydantic import Field

from polo.tasks.base import Example
from polo.tasks.registry import register_task
from polo.tasks.traced import TracedTask
from polo.tasks.word_problem_paraphrases import longest_rewording, word_problem_paraphrases


@dataclass(frozen=True)
class Family:
    """Items of one kind and the verbs that change their count (``{j}`` the amount, ``{o}`` another person)."""

    items: tuple[str, ...]
    gains: tuple[str, ...]
    losses: tuple[str, ...]


FAMILIES = (
    Family(("apples", "pears", "plums", "eggs"), ("buys {j} more", "picks {j} more"),
           ("eats {j}", "gives {j} to {o}")),
    Family(("cards", "stamps", "marbles"), ("wins {j} more", "finds {j} more"), ("loses {j}", "gives {j} to {o}")),
    Family(("coins", "tokens"), ("earns {j} more", "finds {j} more"), ("spends {j}", "pays {j} to {o}")),
)
NAMES = ("Ann", "Bob", "Cal", "Dev", "Eve", "Fay", "Gus", "Ida", "Jon", "Kim", "Lea", "Max", "Ned", "Pam",
         "Sam", "Tom", "Una", "Zoe")
OTHER_ITEMS = ("pens", "cups", "hats", "books", "keys", "socks")
PRICED = ("pen", "cup", "hat", "book", "lamp", "kite")
SMALL = range(2, 10)
"""Factors, divisors and box sizes."""

Computation = tuple[int, str, int, int]
"""``(a, op, b, a op b)``, one line of the trace."""


@dataclass(frozen=True)
class Story:
    """A drawn problem: its sentences in order (distractors included), the computations the story implies,
    and the question."""

    sentences: tuple[str, ...]
    computations: tuple[Computation, ...]
    question: str

    @property
    def prompt(self) -> str:
        return " ".join((*self.sentences, self.question)) + "\n"

    @property
    def answer(self) -> int:
        return self.computations[-1][3]


def line(c: Computation) -> str:
    a, op, b, result = c
    return f"{a}{op}{b}={result}"


def _change(rng: random.Random, x: int, remaining: int, bound: int, family: Family, hero: str,
            other: str) -> tuple[str, tuple[Computation, ...]]:
    """One sentence that changes the hero's count ``x`` (``1 <= x <= bound``) by at most ``remaining``
    computations, every value staying in ``1 .. bound``."""
    factors = [k for k in SMALL if x * k <= bound]
    divisors = [p for p in SMALL if x % p == 0]
    kinds = ["gain"] * (x < bound) + ["loss"] * (x > 1) + ["times"] * bool(factors) + ["share"] * bool(divisors)
    if remaining >= 2:
        kinds += ["box_gain"] * (x + 4 <= bound) + ["box_loss"] * (x > 4)
    kind = rng.choice(kinds)
    if kind == "gain":
        j = rng.randint(1, bound - x)
        return f"{hero} {rng.choice(family.gains).format(j=j)}.", ((x, "+", j, x + j),)
    if kind == "loss":
        j = rng.randint(1, x - 1)
        return f"{hero} {rng.choice(family.losses).format(j=j, o=other)}.", ((x, "-", j, x - j),)
    if kind == "times":
        k = rng.choice(factors)
        return f"{hero} now has {k} times as many.", ((x, "*", k, x * k),)
    if kind == "share":
        p = rng.choice(divisors)
        return f"{hero} keeps 1/{p} of them.", ((x, "/", p, x // p),)
    room = bound - x if kind == "box_gain" else x - 1
    k, m = rng.choice([(k, m) for k in SMALL for m in SMALL if k * m <= room])
    if kind == "box_gain":
        return f"{hero} gets {k} boxes of {m}.", ((k, "*", m, k * m), (x, "+", k * m, x + k * m))
    return f"{hero} gives away {k} boxes of {m}.", ((k, "*", m, k * m), (x, "-", k * m, x - k * m))


def _distractor(rng: random.Random, name: str, items: str, bound: int) -> str:
    n = rng.randint(1, bound)
    return rng.choice((f"{name} has {n} {items}.", f"{name} has {n} {rng.choice(OTHER_ITEMS)}.",
                       f"A {rng.choice(PRICED)} costs {n} dollars."))


def draw_story(rng: random.Random, ops: int, distractors: int, bound: int) -> Story:
    """A story implying ``ops`` computations, with ``distractors`` irrelevant sentences inserted anywhere."""
    family = rng.choice(FAMILIES)
    items = rng.choice(family.items)
    hero, *others = rng.sample(NAMES, 1 + max(distractors, 1))
    if rng.random() < 1 / 3:
        k, m = rng.choice([(k, m) for k in SMALL for m in SMALL if k * m <= bound])
        sentences, computations = [f"{hero} has {k} boxes of {m} {items}."], [(k, "*", m, k * m)]
        x = k * m
    else:
        x = rng.randint(2, bound)
        sentences, computations = [f"{hero} has {x} {items}."], []
    while len(computations) < ops:
        sentence, new = _change(rng, x, ops - len(computations), bound, family, hero, rng.choice(others))
        sentences.append(sentence)
        computations.extend(new)
        x = new[-1][3]
    for name in others[:distractors]:
        sentences.insert(rng.randint(0, len(sentences)), _distractor(rng, name, items, bound))
    return Story(tuple(sentences), tuple(computations), f"How many {items} does {hero} have?")


@register_task("word_problems")
class WordProblems(TracedTask):
    """Multi-step arithmetic word problems with distractors; knobs ``ops``, ``distractors``, ``max_value``."""

    ops: int = Field(2, ge=2, le=5)
    """Computations the story implies (lines of the trace)."""
    distractors: int = Field(1, ge=0, le=3)
    """Irrelevant sentences stating other quantities."""
    max_value: int = Field(20, ge=10, le=999)
    """Bound on every value of the trace (operands and results)."""

    @property
    def max_completion_chars(self) -> int:
        # ops lines of at most three numbers of `digits` characters plus two symbols, the newlines between
        # them, then "\n#### " and the answer; reached when max_value is 99, 999 (every width possible).
        digits = len(str(self.max_value))
        return self.ops * (3 * digits + 2) + (self.ops - 1) + 6 + digits

    def sample(self, rng: random.Random) -> Example:
        story = draw_story(rng, self.ops, self.distractors, self.max_value)
        trace = "\n".join(map(line, story.computations))
        return Example(story.prompt, str(story.answer), {"trace": trace})

    def trace(self, example: Example) -> str:
        return example.columns["trace"]

    def paraphrases(self, example: Example, k: int, rng: random.Random) -> list[Example]:
        """``k`` rewordings of the story, same numbers, events and answer (``polo.tasks.word_problem_paraphrases``)."""
        return word_problem_paraphrases(example, k, rng)

    def longest_paraphrase(self, example: Example) -> Example:
        """The longest rewording ``paraphrases`` can return (the context check reads it)."""
        return longest_rewording(example)

    def answer_correct(self, answer: str, example: Example) -> bool:
        """Digits without a leading zero (or ``0``) whose value is the answer."""
        return re.fullmatch(r"0|[1-9][0-9]*", answer) is not None and int(answer) == int(example.answer)
