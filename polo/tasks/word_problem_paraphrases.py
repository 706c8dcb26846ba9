"""Rewordings of ``word_problems`` stories: the same problem (numbers, people, items, order of events, answer)
told with other words, for paraphrase groups (the ``paraphrase_group`` prompt sampler).

Each sentence form the story generator writes has a few equivalent wordings (``REWORDINGS``: a pattern and
its alternatives; the first alternative is the generator's own wording). A paraphrase rewords every sentence
with an alternative drawn at random, so K paraphrases of one story differ sentence by sentence while the
trace, the computations in the story's order, stays the same.
"""
from __future__ import annotations

import random
import re
from dataclasses import replace

from polo.tasks.base import Example

REWORDINGS: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = tuple((re.compile(p), alts) for p, alts in (
    (r"(\w+) has (\d+) boxes of (\d+) (\w+)\.",
     ("{0} has {1} boxes of {2} {3}.", "{0} has {1} boxes with {2} {3} in each.", "{0} owns {1} boxes of {2} {3}.")),
    (r"(\w+) has (\d+) (\w+)\.", ("{0} has {1} {2}.", "{0} owns {1} {2}.", "{0} starts with {1} {2}.")),
    (r"(\w+) (buys|picks|wins|finds|earns) (\d+) more\.",
     ("{0} {1} {2} more.", "{0} {1} another {2}.", "{0} {1} {2} extra.")),
    (r"(\w+) (eats|loses|spends) (\d+)\.", ("{0} {1} {2}.", "{0} {1} {2} of them.")),
    (r"(\w+) (gives|pays) (\d+) to (\w+)\.", ("{0} {1} {2} to {3}.", "{0} {1} {3} {2}.", "{0} {1} {2} of them to {3}.")),
    (r"(\w+) now has (\d+) times as many\.",
     ("{0} now has {1} times as many.", "{0} now has {1} times the amount.", "{0} ends up with {1} times as many.")),
    (r"(\w+) keeps 1/(\d+) of them\.", ("{0} keeps 1/{1} of them.", "{0} keeps only 1/{1} of them.",
                                        "{0} keeps a 1/{1} share of them.")),
    (r"(\w+) gets (\d+) boxes of (\d+)\.",
     ("{0} gets {1} boxes of {2}.", "{0} receives {1} boxes of {2}.", "{0} gets {1} boxes with {2} in each.")),
    (r"(\w+) gives away (\d+) boxes of (\d+)\.",
     ("{0} gives away {1} boxes of {2}.", "{0} hands out {1} boxes of {2}.", "{0} gives away {1} boxes with {2} in each.")),
    (r"A (\w+) costs (\d+) dollars\.", ("A {0} costs {1} dollars.", "One {0} costs {1} dollars.",
                                        "The price of a {0} is {1} dollars.")),
    (r"How many (\w+) does (\w+) have\?", ("How many {0} does {1} have?", "How many {0} does {1} have now?",
                                           "How many {0} does {1} end up with?", "What number of {0} does {1} have?")),
))
SENTENCE_END = re.compile(r"(?<=[.?]) ")


def sentence_wordings(sentence: str) -> list[str]:
    """Every wording of one sentence (itself first); a sentence of no known form has only its own."""
    for pattern, alternatives in REWORDINGS:
        match = pattern.fullmatch(sentence)
        if match:
            return [alt.format(*match.groups()) for alt in alternatives]
    return [sentence]


def reword(prompt: str, rng: random.Random) -> str:
    """``prompt`` (sentences joined by spaces, a final newline) with each sentence in a random wording."""
    sentences = SENTENCE_END.split(prompt.rstrip("\n"))
    return " ".join(rng.choice(sentence_wordings(s)) for s in sentences) + "\n"


def longest_rewording(example: Example) -> Example:
    """``example`` with every sentence in its longest wording: no paraphrase of it is longer (in characters)."""
    sentences = SENTENCE_END.split(example.prompt.rstrip("\n"))
    return replace(example, prompt=" ".join(max(sentence_wordings(s), key=len) for s in sentences) + "\n")


def word_problem_paraphrases(example: Example, k: int, rng: random.Random, attempts: int = 20) -> list[Example]:
    """``k`` rewordings of ``example``, each different from the original and from one another when the story has
    that many wordings (a draw repeats after ``attempts`` tries per paraphrase); answer and columns unchanged."""
    if k < 0:
        raise ValueError(f"word_problems paraphrases: k must be >= 0, got {k}")
    seen, out = {example.prompt}, []
    for _ in range(k):
        for _ in range(attempts):
            prompt = reword(example.prompt, rng)
            if prompt not in seen:
                break
        seen.add(prompt)
        out.append(replace(example, prompt=prompt))
    return out
