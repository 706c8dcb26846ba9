"""``environment``: the episodes of a text environment (``polo.envs``), for the ``multi_turn`` engine.

Config: ``{"name": "environment", "env": {"name": "TextGrid-v0", "obs_mode": "local"}, "history_window": 4}``.
An example is one episode: its seed (``columns["seed"]``), its first observation and the environment's gold
answer. The train/test split is by seed (``split_of("<env>:<seed>")``), since different seeds can open with
the same observation. The rewards are the environment's, summed over the episode by the engine: a recipe
names no reward functions.

An environment that runs programs (CodeFix's hidden tests) is built with the code sandbox, ``sandbox_tester``:
polo.tasks imports polo.envs and never the other way (polo.envs imports nothing from polo.tasks).

The policy acts in the context ``env.render(history, history_window) + "|"`` and writes one action. The
supervised warm start imitates ε-noisy scripted-expert episodes (``warm_epsilon``): each step is a
demonstration (context → the action taken, noisy ones included), so the warm-started policy is itself noisy
and the G episodes of a task end differently, which group-relative RL needs.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, field_validator

from polo.envs import TURN_SEP, Environment, make, noisy_expert, play
from polo.tasks.base import Example, Split, Task, check_split, split_of
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardSpec
from polo.tasks.sandbox import ProgramTests, SandboxLimits, check_programs

MAX_SEED = 2**31
ENV_SANDBOX = SandboxLimits(timeout_s=10.0)
"""The sandbox's isolation and limits for an environment's programs (a generous wall clock: a test run that times
out would fail)."""


def sandbox_tester(source: str, tests: Sequence[tuple[tuple[Any, ...], Any]], function: str) -> list[bool]:
    """The ``ProgramTester`` an environment that runs programs gets: per test ``(args, expected)``, whether
    ``function(*args)`` of ``source`` returned ``expected`` in the code sandbox (``ENV_SANDBOX``), through
    ``check_programs``' cache, so each distinct program runs once per process."""
    return check_programs([ProgramTests(source, tuple(tests), function)], ENV_SANDBOX, 1)[0]


@register_task("environment")
class EnvironmentTask(Task):
    """Episodes of the text environment ``env`` (a ``polo.envs`` registry config)."""

    default_rewards: ClassVar[list[RewardSpec]] = []
    """None: the environment's rewards are the episode's return."""

    env: dict[str, Any] = {"name": "TextGrid-v0"}
    """The environment: ``{"name": ..., **knobs}`` of a registered ``polo.envs`` environment."""
    history_window: int = Field(4, ge=0)
    """Past turns (action; observation) shown in the context, oldest dropped first."""
    warm_epsilon: float = Field(0.3, ge=0.0, le=1.0)
    """Probability of a random valid action in the warm start's scripted-expert episodes."""

    @field_validator("env")
    @classmethod
    def _buildable(cls, env: dict[str, Any]) -> dict[str, Any]:
        make(env, sandbox_tester)  # unknown names and bad knobs fail at validation, naming the key
        return env

    def make_env(self, **knobs: Any) -> Environment:
        """A fresh environment of ``env`` (``knobs`` override its own), with the code sandbox if it runs programs."""
        return make(self.env, sandbox_tester, **knobs)

    def context(self, env: Environment, history: list[tuple[str, str]], chat: bool = False) -> str | Example:
        """What the policy reads before its next action: the rendered text, or (``chat``, a checkpoint with a
        chat template) an Example whose messages are the opening observation as the user's turn, then each
        kept turn's action as the assistant's and its observation as the tool's (an environment with its own
        rendering, like KBLookup's memory variant, gives its rendered text as one user turn)."""
        text = env.render(history, self.history_window) + TURN_SEP
        if not chat:
            return text
        if not env.plain_history:
            messages = [{"role": "user", "content": text}]
        else:
            kept = list(history)[-self.history_window:] if self.history_window else []
            messages = [{"role": "user", "content": env.prompt}]
            for action, observation in kept:
                messages += [{"role": "assistant", "content": action}, {"role": "tool", "content": observation}]
        return Example(text, str(env.gold), {}, tuple(messages))

    @property
    def max_completion_chars(self) -> int:
        return type(self.make_env()).max_action_chars

    def seeds(self, split: Split, n: int, seed: int) -> list[int]:
        """``n`` episode seeds of ``split``, deterministic given ``seed``."""
        check_split(split)
        rng, name, out = random.Random(seed), self.env.get("name"), []
        while len(out) < n:
            s = rng.randrange(MAX_SEED)
            if split_of(f"{name}:{s}", self.test_fraction) == split:
                out.append(s)
        return out

    def examples(self, split: Split, n: int, seed: int) -> list[Example]:
        env, out = self.make_env(), []
        for s in self.seeds(split, n, seed):
            first = env.reset(s)
            out.append(Example(f"seed {s}: {first}", str(env.gold), {"seed": s}))
        return out

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        """The steps of ε-noisy expert episodes on training seeds, in order, until there are ``n``."""
        env, rng, out = self.make_env(), random.Random(seed), []
        policy = noisy_expert(self.warm_epsilon, rng)
        for s in self.seeds("train", n, seed):
            episode = play(env, s, policy, self.history_window)
            out += [Example(context + TURN_SEP, action, {"seed": s}) for context, action, _ in episode.steps]
            if len(out) >= n:
                break
        return out[:n]

    def is_correct(self, completion: str, example: Example) -> bool:
        """For a warm-start step: the demonstrated action (episodes are judged by the engine)."""
        return completion.strip() == example.answer
