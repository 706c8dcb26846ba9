"""Whole episodes: ``play(env, seed, policy_fn, window)``, the ε-noisy scripted expert that makes warm-start data and
the random policy that explores an environment without an expert.

A policy is a callable ``policy_fn(env, context) -> action``: it sees the environment (the scripted policies
read its oracles) and the rendered context (what a language model sees).
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from polo.envs.base import Environment, StepResult

PolicyFn = Callable[[Environment, str], str]


@dataclass
class Transcript:
    """One episode: per step the context the action was chosen in, the action and the step's result."""

    seed: int
    steps: list[tuple[str, str, StepResult]] = field(default_factory=list)
    total_reward: float = 0.0
    success: bool = False


def play(env: Environment, seed: int, policy_fn: PolicyFn, window: int = 4) -> Transcript:
    """Run the episode of ``seed`` until it terminates or is truncated, rendering each context with
    ``env.render(history, window)``."""
    env.reset(seed)
    transcript, history = Transcript(seed), []
    while not env.done:
        context = env.render(history, window)
        action = policy_fn(env, context)
        result = env.step(action)
        history.append((action, result.observation))
        transcript.steps.append((context, action, result))
        transcript.total_reward += result.reward
    transcript.success = env.success
    return transcript


def expert_policy(env: Environment, context: str) -> str:
    """The scripted expert: ``env.expert()``."""
    return env.expert()


def noisy_expert(epsilon: float, rng: random.Random) -> PolicyFn:
    """A policy that takes, at each step, a random element of ``env.valid_actions()`` when ``rng.random() <
    epsilon`` and the expert's action otherwise (one ``rng.random()`` per step, one ``rng.choice`` per random
    action, so it is deterministic given ``rng``'s state)."""
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")

    def policy(env: Environment, context: str) -> str:
        return rng.choice(env.valid_actions()) if rng.random() < epsilon else env.expert()

    return policy


def random_policy(rng: random.Random) -> PolicyFn:
    """A policy that takes a random element of ``env.valid_actions()`` at each step (one ``rng.choice`` per step)."""

    def policy(env: Environment, context: str) -> str:
        return rng.choice(env.valid_actions())

    return policy


def has_expert(env: Environment) -> bool:
    """Whether the started episode of ``env`` has a scripted expert (its ``expert()`` answers)."""
    try:
        env.expert()
    except NotImplementedError:
        return False
    return True
