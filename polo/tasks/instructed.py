"""``instructed_environment``: the ``environment`` task with an instruction in front of every context.

An instruction is a few words of a fragment grammar (``fragments``: (word, effect) pairs), written in the
grammar's order and joined by spaces; the policy reads ``"<instruction>|<context>"`` (``instructed``). For the
instruction to matter, the warm start draws one instruction per demonstration episode (``sizes`` fragments,
distinct, uniformly) and the demonstrator follows it: its ε (the probability of a random valid action) is
``clip(warm_epsilon + Σ effect(word), 0, 1)``. So some instructions ("check hop") make the warm-started policy
act like the expert and others ("guess skip") make it noisy: an outer loop over instructions (INSPO, the
``inspo`` engine) has something to find. This is a built-in stand-in for a large model's sensitivity to its
system prompt; the policy is never told the effects.
"""
from __future__ import annotations

import random

from pydantic import Field, field_validator

from polo.envs import TURN_SEP, noisy_expert, play
from polo.tasks.base import Example
from polo.tasks.environment import EnvironmentTask
from polo.tasks.registry import register_task

FRAGMENTS = [("check", -0.2), ("hop", -0.2), ("read", -0.15), ("twice", -0.05),
             ("fast", 0.15), ("guess", 0.3), ("skip", 0.25), ("any", 0.1)]
"""The default grammar: words that lower the demonstrator's noise and words that raise it."""


def instructed(instruction: str, context: str | Example) -> str | Example:
    """``context`` with ``instruction`` in front: ``"<instruction>|<context>"`` (a chat context: the instruction
    as a system message first); an empty instruction leaves it unchanged."""
    if not instruction:
        return context
    if isinstance(context, str):
        return instruction + TURN_SEP + context
    messages = ({"role": "system", "content": instruction}, *context.messages)
    return Example(instruction + TURN_SEP + context.prompt, context.answer, context.columns, messages)


@register_task("instructed_environment")
class InstructedEnvironmentTask(EnvironmentTask):
    """Episodes of ``env`` whose warm-start demonstrations follow a random instruction of ``fragments``."""

    fragments: list[tuple[str, float]] = Field(default_factory=lambda: list(FRAGMENTS))
    """The instruction grammar: (word, its shift of the demonstrator's ε) pairs (negative: closer to the expert)."""
    sizes: tuple[int, int] = (2, 3)
    """The fewest and most fragments of one instruction."""

    @field_validator("fragments")
    @classmethod
    def _words(cls, fragments: list[tuple[str, float]]) -> list[tuple[str, float]]:
        words = [w for w, _ in fragments]
        bad = [w for w in words if not w or not w.isalnum() or not w.islower()]
        if not fragments or bad or len(set(words)) != len(words):
            raise ValueError(f"fragments must be distinct non-empty lowercase words of letters and digits; got "
                             f"{bad or words}")
        return fragments

    @property
    def words(self) -> list[str]:
        """The grammar's words, in order."""
        return [w for w, _ in self.fragments]

    @field_validator("sizes")
    @classmethod
    def _range(cls, sizes: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= sizes[0] <= sizes[1]:
            raise ValueError(f"sizes must be (fewest, most) with 1 ≤ fewest ≤ most, got {list(sizes)}")
        return sizes

    def compose(self, chosen) -> str:
        """The instruction of the words ``chosen``, in the grammar's order."""
        chosen = set(chosen)
        return " ".join(w for w in self.words if w in chosen)

    def random_instruction(self, rng: random.Random) -> str:
        """``rng.randint`` fragments (within ``sizes``, at most all of them), drawn without replacement."""
        n = min(rng.randint(*self.sizes), len(self.fragments))
        return self.compose(rng.sample(self.words, n))

    def epsilon(self, instruction: str) -> float:
        """The demonstrator's ε under ``instruction``: ``clip(warm_epsilon + Σ effect(word), 0, 1)``."""
        effect = dict(self.fragments)
        shift = sum(effect.get(w, 0.0) for w in instruction.split())
        return min(1.0, max(0.0, self.warm_epsilon + shift))

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        """The steps of instruction-following noisy-expert episodes on training seeds, until there are ``n``."""
        env, rng, out = self.make_env(), random.Random(seed), []
        for s in self.seeds("train", n, seed):
            instruction = self.random_instruction(rng)
            episode = play(env, s, noisy_expert(self.epsilon(instruction), rng), self.history_window)
            out += [Example(instructed(instruction, context + TURN_SEP), action, {"seed": s})
                    for context, action, _ in episode.steps]
            if len(out) >= n:
                break
        return out[:n]
