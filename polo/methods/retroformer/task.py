"""``reflection``: environment episodes for Retroformer's frozen actor and its retrospective model.

Retroformer ("Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization",
arXiv:2308.02151) keeps the actor frozen and trains a retrospective model that reads a failed trial and writes a
reflection (a root cause and a plan) for the actor's next trial. This task is ``environment`` (the same seeds,
split and rendering) plus the two texts the ``retroformer`` engine needs and the data that teaches one built-in
model both parts:

* the actor's context: ``m:<r1>/<r2>/<r3>|`` (the last ``memory_size`` reflections, newest last; absent
  without memory) before the usual ``prompt|a1;o1|...|``;
* the retrospective context: the failed trial in full (``prompt|a1;o1|...|aT;oT``) then ``|ret:<G>|``;
* a reflection ``<cause> plan:<moves>``: the cause read from the trial (``bad`` an invalid action, ``bump`` a
  blocked move, ``loop`` a state seen twice, else ``slow``) and up to ``plan_len`` actions to open the next
  trial with.

Warm start (one model, both roles; the actor role is its frozen copy): a fraction ``actor_share`` of the seeds
give actor episodes, ε-noisy expert episodes where, with probability ``memory_p``, the context holds a
reflection memory whose newest plan is the expert's first moves (``expert_plan_p``) or random moves, and the
demonstrator opens the episode with that plan's moves, each followed with probability ``follow``. So the
actor learns to read plans and to follow them, good or bad: a reflection matters. The other seeds give
retrospective examples: a failed trial of a very noisy expert (``fail_epsilon``) → its true cause and a
*random* plan. The warm-started retrospective model writes well-formed but uninformed reflections; what makes a
plan useful is left to reinforcement learning, rewarded by the next trial's improvement.
"""
from __future__ import annotations

import random
from typing import Any

from pydantic import Field

from polo.envs import TURN_SEP, Environment, expert_policy, noisy_expert, play
from polo.tasks.base import Example
from polo.tasks.environment import EnvironmentTask
from polo.tasks.registry import register_task

PLAN = "plan:"
MEMORY = "m:"
MEMORY_SEP = "/"
CAUSES = ("bad", "bump", "loop", "slow")
FAILURE_TRIES = 20
"""Noisy-expert episodes tried per seed for a failed trial (a seed whose tries all succeed gives none)."""


def failure_cause(steps: list[tuple[str, Any]]) -> str:
    """The cause a reflection names for a trial of ``(observation after, info)`` steps: ``bad`` (an invalid action),
    ``bump`` (a move the environment blocked), ``loop`` (an observation seen twice), else ``slow``."""
    if any(not info["valid"] for _, info in steps):
        return "bad"
    if any(info.get("bump") for _, info in steps):
        return "bump"
    seen = [info["anchor_obs"] for _, info in steps] + [steps[-1][0]] if steps else []
    return "loop" if len(set(seen)) < len(seen) else "slow"


def reflection_text(cause: str, moves: str) -> str:
    return f"{cause} {PLAN}{moves}"


@register_task("reflection")
class ReflectionTask(EnvironmentTask):
    """``environment`` with Retroformer's actor and retrospective contexts and their mixed warm start."""

    paper = "Retroformer: Retrospective Large Language Agents with Policy Gradient Optimization (arXiv:2308.02151)"
    provenance = "RECONSTRUCTED"

    plan_len: int = Field(4, ge=1, le=12)
    """Most actions in a reflection's plan."""
    memory_size: int = Field(3, ge=1)
    """Reflections kept in the actor's memory (the newest ``memory_size``)."""
    actor_share: float = Field(0.7, ge=0.0, le=1.0)
    """Warm start: fraction of seeds that give actor episodes (the rest give retrospective examples)."""
    memory_p: float = Field(0.6, ge=0.0, le=1.0)
    """Warm start: probability that an actor episode has a reflection memory."""
    expert_plan_p: float = Field(0.5, ge=0.0, le=1.0)
    """Warm start: probability that the newest plan in a memory is the expert's first moves (else random)."""
    follow: float = Field(0.9, ge=0.0, le=1.0)
    """Warm start: probability that the demonstrator takes the plan's move at each of the plan's steps."""
    fail_epsilon: float = Field(0.7, ge=0.0, le=1.0)
    """Warm start: ε of the noisy expert whose failed trials the retrospective examples reflect on."""

    @property
    def max_completion_chars(self) -> int:
        reflection = max(len(c) for c in CAUSES) + 1 + len(PLAN) + self.plan_len
        return max(super().max_completion_chars, reflection)

    def actor_context(self, env: Environment, history: list[tuple[str, str]], memory: list[str]) -> str:
        """The actor's context: the newest ``memory_size`` reflections (if any), then the rendered episode."""
        text = env.render(history, self.history_window) + TURN_SEP
        kept = memory[-self.memory_size:]
        return f"{MEMORY}{MEMORY_SEP.join(kept)}{TURN_SEP}{text}" if kept else text

    def retro_context(self, env: Environment, history: list[tuple[str, str]], episode_return: float) -> str:
        """The retrospective model's context: the whole trial and its return."""
        return f"{env.render(history, len(history))}{TURN_SEP}ret:{episode_return:g}{TURN_SEP}"

    def plan(self, reflection: str) -> list[str]:
        """The actions of a reflection's plan: the text after ``plan:`` up to ``plan_len`` characters, one action
        each (TextGrid's one-letter moves); none when the reflection has no plan."""
        _, found, moves = reflection.partition(PLAN)
        return list(moves.strip()[: self.plan_len]) if found else []

    def warm_start_examples(self, n: int, seed: int) -> list[Example]:
        """Actor steps and retrospective examples, mixed by seed (see the module docstring), until there are ``n``."""
        env, rng, out = self.make_env(), random.Random(seed), []
        for s in self.seeds("train", n, seed):
            actor = rng.random() < self.actor_share
            out += self._actor_steps(env, s, rng) if actor else self._retro_example(env, s, rng)
            if len(out) >= n:
                break
        return out[:n]

    def _random_plan(self, env: Environment, rng: random.Random) -> str:
        return "".join(rng.choice(env.valid_actions()) for _ in range(rng.randint(1, self.plan_len)))

    def _actor_steps(self, env: Environment, seed: int, rng: random.Random) -> list[Example]:
        memory: list[str] = []
        if rng.random() < self.memory_p:
            expert = "".join(a for _, a, _ in play(env, seed, expert_policy, 0).steps[: self.plan_len])
            plans = [self._random_plan(env, rng) for _ in range(rng.randint(0, self.memory_size - 1))]
            plans.append(expert if rng.random() < self.expert_plan_p else self._random_plan(env, rng))
            memory = [reflection_text(rng.choice(CAUSES), p) for p in plans]
        moves = self.plan(memory[-1]) if memory else []
        noisy, taken = noisy_expert(self.warm_epsilon, rng), [0]

        def policy(env_: Environment, context: str) -> str:
            t, taken[0] = taken[0], taken[0] + 1
            return moves[t] if t < len(moves) and rng.random() < self.follow else noisy(env_, context)

        episode = play(env, seed, policy, self.history_window)
        prefix = f"{MEMORY}{MEMORY_SEP.join(memory[-self.memory_size:])}{TURN_SEP}" if memory else ""
        return [Example(prefix + context + TURN_SEP, action, {"seed": seed}) for context, action, _ in episode.steps]

    def _retro_example(self, env: Environment, seed: int, rng: random.Random) -> list[Example]:
        policy = noisy_expert(self.fail_epsilon, rng)
        for _ in range(FAILURE_TRIES):
            trial = play(env, seed, policy, 0)
            if not trial.success:
                history = [(a, r.observation) for _, a, r in trial.steps]
                cause = failure_cause([(r.observation, r.info) for _, _, r in trial.steps])
                context = self.retro_context(env, history, trial.total_reward)
                return [Example(context, reflection_text(cause, self._random_plan(env, rng)), {"seed": seed})]
        return []

