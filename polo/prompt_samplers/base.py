"""Prompt samplers (``prompt_sampler`` in a recipe): which prompts are rolled out and which groups are kept.

A prompt sampler receives the prompt stream (``next(n) -> (examples, pool indices)``) and
``generate(examples, indices) -> Rollouts`` (the engine's scored rollouts of those prompts), and returns the
step's ``prompts_per_step`` groups.
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
from pydantic import Field

from polo.core.registry import METHODS, Component, Registry
from polo.core.segment import group_reward_spread
from polo.engines.base import Rollouts

PROMPT_SAMPLERS: Registry = Registry("prompt_sampler", ("polo.prompt_samplers", METHODS), default="uniform")
Generate = Callable[[list, list[int]], Rollouts]


def keep_groups(n: int, next_round: Callable[[int, int], Rollouts | None],
                keep: Callable[[Rollouts], torch.Tensor]) -> tuple[Rollouts, int, int, int]:
    """Rounds of rollouts until ``n`` groups are kept: ``next_round(round, missing)`` gives round ``round``'s
    (0-based) rollouts, or None to stop; ``keep(got)`` marks the groups to keep, taken in order while groups are
    missing. Returns ``(kept groups, or the last round's rollouts when none was kept; groups kept; groups rolled
    out; rounds)``."""
    kept: list[Rollouts] = []
    have, generated, rounds, got = 0, 0, 0, None
    while have < n:
        last = next_round(rounds, n - have)
        if last is None:
            break
        got, rounds = last, rounds + 1
        mask = keep(got)
        generated += len(mask)
        mask &= mask.cumsum(0) <= n - have
        if mask.any():
            kept.append(got.select_groups(mask))
            have += int(mask.sum())
    return (Rollouts.concat(kept) if kept else got), have, generated, rounds


class PromptSampler(Component):
    def collect(self, stream, generate: Generate, n_prompts: int, generator: torch.Generator,
                components: dict) -> tuple[Rollouts, dict[str, float]]:
        raise NotImplementedError


@PROMPT_SAMPLERS.register("uniform")
class Uniform(PromptSampler):
    """The next ``n`` prompts of the shuffled stream, every group kept."""

    def collect(self, stream, generate, n_prompts, generator, components):
        return generate(*stream.next(n_prompts)), {}


@PROMPT_SAMPLERS.register("dynamic_sampling")
class DynamicSampling(PromptSampler):
    """DAPO dynamic sampling: drop groups that carry no signal and roll out more prompts until
    ``n`` groups are kept or ``max_rounds`` generation rounds are spent (then train on what was kept).

    ``filter="mixed"`` keeps a group iff its task rewards are not all equal (0 < accuracy < 1 for binary
    rewards; DAPO); ``"not_all_correct"`` drops only all-correct groups (NGRPO keeps all-wrong groups,
    whose virtual-max-reward advantages are negative).
    """

    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"
    requires = frozenset({"correct"})
    filter: Literal["mixed", "not_all_correct"] = "mixed"
    max_rounds: int = Field(3, ge=1)
    oversample: float = Field(1.0, ge=1.0)
    """Prompts per round = oversample × the groups still missing."""

    def keep(self, got: Rollouts) -> torch.Tensor:
        batch = got.batch
        if self.filter == "mixed":
            return group_reward_spread(batch.scalar_reward(), batch.group) > 0
        correct = batch.extras["correct"]
        n = int(batch.group.max()) + 1
        all_correct = torch.ones(n).scatter_reduce(0, batch.group, correct, "amin") > 0
        return ~all_correct

    def collect(self, stream, generate, n_prompts, generator, components):
        def next_round(done: int, want: int) -> Rollouts | None:
            return None if done == self.max_rounds else generate(*stream.next(max(want, int(round(want * self.oversample)))))

        # nothing carried signal: train on the last round (its advantages are zero)
        got, have, generated, rounds = keep_groups(n_prompts, next_round, self.keep)
        return got, {"sampler/rounds": rounds, "sampler/kept_frac": have / max(generated, 1), "sampler/groups": have}


@PROMPT_SAMPLERS.register("spo_priority")
class SPOPriority(PromptSampler):
    """SPO prioritized sampling: draw ``n`` prompts from ``candidates × n`` candidates with probability
    ∝ the advantage tracker's ``sampling_weights`` (``sqrt(p̂(1−p̂)) + ε``), without replacement."""

    paper = "Single-stream Policy Optimization (arXiv:2509.13232)"
    candidates: float = Field(4.0, ge=1.0)
    requires = frozenset({"prompt_index"})

    def check_with(self, components: dict) -> None:
        if not hasattr(components["advantage"], "sampling_weights"):
            raise ValueError(f"prompt_sampler spo_priority needs an advantage with sampling_weights (spo_tracker), "
                             f"got {components['advantage'].registry_name!r}")

    def collect(self, stream, generate, n_prompts, generator, components):
        tracker = components["advantage"]
        examples, index = stream.next(int(n_prompts * self.candidates))
        weights = tracker.sampling_weights(torch.tensor(index)).double()
        pick = torch.multinomial(weights, n_prompts, replacement=False, generator=generator).tolist()
        return generate([examples[i] for i in pick], [index[i] for i in pick]), {}
