"""``environment``: the episodes of a text environment (``polo.envs``), for the ``multi_turn`` engine.

Config: ``{"name": "environment", "env": {"name": "TextGrid-v0", "obs_mode": "local"}, "history_window": 4}``.
An example is one episode: its seed (``columns["seed"]``), its first observation and the environment's gold
answer. The train/test split is by seed (``split_of("<env>:<seed>")``), since different seeds can open with
the same observation. The rewards are the environment's, summed over the episode by the engine: a recipe
names no reward functions.

An environment that runs programs (CodeFix's hidden tests) is built with the code sandbox, ``sandbox_tester``:
polo.tasks imports polo.envs and never the other way (polo.envs imports nothing from polo.tasks).

The policy acts in the context ``env.render(history, history_window) + "|"`` and writes one action. The
supervised warm start imitates (``demonstrations``) ε-noisy scripted-expert episodes (``warm_epsilon``): each step
is a demonstration (context → the action taken, noisy ones included), so the warm-started policy is itself noisy
and the G episodes of a task end differently, which group-relative RL needs. An environment without an expert
(one a user wrote) is imitated on its own successful episodes instead: random episodes (``random_policy``: its
``valid_actions()``) on training seeds, ``SUCCESS_TRIES`` at most per seed, the first success of each kept
(self-imitation of successful trajectories, as in "Self-Imitation Learning", Oh et al., arXiv:1806.05635, here
offline and before RL). An environment without a gold answer gives its examples the answer ``""``.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from polo.core.registry import ConfigError
from polo.envs import TURN_SEP, Environment, has_expert, make, noisy_expert, play, random_policy
from polo.tasks.agent_context import ContextFit, fitted, lay_out
from polo.tasks.base import Example, Split, Task, check_split, split_of
from polo.tasks.registry import register_task
from polo.tasks.rewards import RewardSpec
from polo.tasks.sandbox import ProgramTests, SandboxLimits, check_programs

MAX_SEED = 2**31
SUCCESS_TRIES = 16
"""The most random episodes played per training seed when the warm start imitates the environment's successes."""
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
    demonstrations: Literal["auto", "expert", "successes"] = "auto"
    """What the warm start imitates: ``expert`` (ε-noisy scripted-expert episodes), ``successes`` (the
    environment's own successful random episodes: it needs ``valid_actions()``) or ``auto`` (the expert when the
    environment has one, else its successes). ``warm_start.steps: 0`` imitates nothing."""

    context_tokens: Annotated[int, Field(gt=0)] | Literal["model"] | None = None
    """The context's token budget. None: the last ``history_window`` turns, and a context beyond the model's
    positions is an error. ``model``: the model's positions minus the action tokens (``rollout.max_new_tokens``); a
    number: that many tokens (or that room, when it is less). Within a budget the context keeps the first observation and the
    newest turns that fit (``history_window`` at most), and one line ``[k earlier turns omitted]`` stands for the
    dropped ones (polo.tasks.agent_context)."""

    key_defaults: ClassVar[dict[str, Any]] = {"demonstrations": "auto", "context_tokens": None}

    @field_validator("env")
    @classmethod
    def _buildable(cls, env: dict[str, Any]) -> dict[str, Any]:
        make(env, sandbox_tester)  # unknown names and bad knobs fail at validation, naming the key
        return env

    def make_env(self, **knobs: Any) -> Environment:
        """A fresh environment of ``env`` (``knobs`` override its own), with the code sandbox if it runs programs."""
        return make(self.env, sandbox_tester, **knobs)

    def context(self, env: Environment, history: Sequence[tuple[str, str]], chat: bool = False,
                fit: ContextFit | None = None) -> str | Example:
        """What the policy reads before its next action (``polo.tasks.agent_context.lay_out``): the rendered text,
        or (``chat``, a checkpoint with a chat template) an Example whose messages are the opening observation as
        the user's turn, then each kept turn's action as the assistant's (a tool call, when the environment
        declares tools) and its observation as the tool's (an environment with its own rendering, like KBLookup's
        memory variant, gives its rendered text as one user turn). With ``context_tokens`` and ``fit`` (the
        engine's measure of the policy's contexts) the newest turns that fit the budget are kept."""
        gold = gold_text(env)
        if self.context_tokens is None or fit is None:
            return lay_out(env, history, self.history_window, chat, gold)
        limit = fit.limit(self.context_tokens)
        why = (f"task.context_tokens={self.context_tokens}; {fit.positions} positions − {fit.action_tokens} action "
               "tokens" if fit.positions is not None else f"task.context_tokens={self.context_tokens}")
        return fitted(lambda kept: lay_out(env, history, kept, chat, gold, note=True),
                      min(self.history_window, len(history)), fit.count, limit, len(history), why)

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
            out.append(Example(f"seed {s}: {first}", gold_text(env), {"seed": s}))
        return out

    def demonstrator(self) -> str:
        """``demonstrations`` resolved: ``expert`` or ``successes``; ConfigError when ``expert`` is asked of an
        environment without one."""
        env = self.make_env()
        env.reset(self.seeds("train", 1, 0)[0])
        if has_expert(env):
            return "successes" if self.demonstrations == "successes" else "expert"
        if self.demonstrations == "expert":
            raise ConfigError(f"task.demonstrations=expert: {env.name} has no scripted expert (expert()); use "
                              f"task.demonstrations: successes (imitate its own successful episodes) or "
                              f"warm_start.steps: 0 (start from the policy as it is)")
        return "successes"

    def consistent_demonstrator(self) -> bool:
        """Only the scripted expert: the first successful random episode of a seed is one of many, so a greedy
        policy cannot match its steps (it is greedily "right" early, while it still samples nearly uniformly)."""
        return self.demonstrator() == "expert"

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        """The steps of the demonstrated episodes on training seeds, in order, until there are ``n``: ε-noisy expert
        episodes, or the first successful random episode of each seed (``demonstrator()``)."""
        env, rng, out = self.make_env(), random.Random(seed), []
        successes = self.demonstrator() == "successes"
        policy = random_policy(rng) if successes else noisy_expert(self.warm_epsilon, rng)
        played = 0
        for s in self.seeds("train", max(n, 64), seed):  # the first n are the expert's: it needs no more
            for _ in range(SUCCESS_TRIES if successes else 1):
                episode, played = play(env, s, policy, self.history_window), played + 1
                if episode.success or not successes:
                    out += [Example(context + TURN_SEP, action, {"seed": s}) for context, action, _ in episode.steps]
                    break
            if len(out) >= n or (not out and played >= SUCCESS_TRIES * 64):  # 64 seeds without a success: give up
                break
        if not out:
            raise ConfigError(f"task.demonstrations=successes: none of {played} random episodes of {env.name} "
                              f"succeeded, so there is nothing to imitate; give it valid_actions() that can succeed "
                              f"or an expert(), or set warm_start.steps: 0 (start from the policy as it is)")
        return out[:n]

    def is_correct(self, completion: str, example: Example) -> bool:
        """For a warm-start step: the demonstrated action (episodes are judged by the engine)."""
        return completion.strip() == example.answer


def gold_text(env: Environment) -> str:
    """The episode's gold answer as an example's answer; ``""`` when the environment has none."""
    return "" if env.gold is None else str(env.gold)
