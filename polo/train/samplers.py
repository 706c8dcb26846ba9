"""Prompt samplers (stage ``Sampler``): which prompts are rolled out and which groups are kept.

A sampler receives ``generate(examples, indices) -> Collected`` (rollouts + scores of those prompts)
and returns the step's batch of ``prompts_per_step`` groups.
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
from pydantic import Field

from polo.core.registry import SAMPLERS, Component
from polo.train.collect import Collected
from polo.train.data import PromptStream
from polo.train.stats import group_reward_spread

Generate = Callable[[list, list[int]], Collected]


class PromptSampler(Component):
    def collect(self, stream: PromptStream, generate: Generate, n_prompts: int, generator: torch.Generator,
                components: dict) -> tuple[Collected, dict[str, float]]:
        raise NotImplementedError


@SAMPLERS.register("uniform")
class Uniform(PromptSampler):
    """The next ``n`` prompts of the shuffled stream, every group kept."""

    def collect(self, stream, generate, n_prompts, generator, components):
        return generate(*stream.next(n_prompts)), {}


@SAMPLERS.register("dynamic_sampling")
class DynamicSampling(PromptSampler):
    """DAPO dynamic sampling: drop groups that carry no signal and roll out more prompts until
    ``n`` groups are kept or ``max_rounds`` generation rounds are spent (then train on what was kept).

    ``filter="mixed"`` keeps a group iff its task rewards are not all equal (0 < accuracy < 1 for binary
    rewards; DAPO); ``"not_all_correct"`` drops only all-correct groups (NGRPO keeps all-wrong groups,
    whose virtual-max-reward advantages are negative).
    """

    spec = "single_turn_core.md §4, §12"
    filter: Literal["mixed", "not_all_correct"] = "mixed"
    max_rounds: int = Field(3, ge=1)
    oversample: float = Field(1.0, ge=1.0)
    """Prompts per round = oversample × the groups still missing."""

    def keep(self, got: Collected) -> torch.Tensor:
        batch = got.batch
        if self.filter == "mixed":
            return group_reward_spread(batch.scalar_reward(), batch.group) > 0
        correct = batch.extras["correct"]
        n = int(batch.group.max()) + 1
        all_correct = torch.ones(n).scatter_reduce(0, batch.group, correct, "amin") > 0
        return ~all_correct

    def collect(self, stream, generate, n_prompts, generator, components):
        kept: list[Collected] = []
        have, rounds, generated = 0, 0, 0
        while have < n_prompts and rounds < self.max_rounds:
            want = n_prompts - have
            got = generate(*stream.next(max(want, int(round(want * self.oversample)))))
            mask = self.keep(got)
            generated += len(mask)
            mask &= mask.cumsum(0) <= want
            if mask.any():
                kept.append(got.select_groups(mask))
                have += int(mask.sum())
            rounds += 1
        metrics = {"sampler/rounds": rounds, "sampler/kept_frac": have / max(generated, 1),
                   "sampler/groups": have}
        if not kept:  # nothing carried signal: train on the last round (its advantages are zero)
            return got, metrics
        return Collected.concat(kept), metrics


@SAMPLERS.register("spo_priority")
class SPOPriority(PromptSampler):
    """SPO prioritized sampling: draw ``n`` prompts from ``candidates × n`` candidates with probability
    ∝ the advantage tracker's ``sampling_weights`` (``sqrt(p̂(1−p̂)) + ε``), without replacement."""

    spec = "single_turn_core.md §10"
    candidates: float = Field(4.0, ge=1.0)

    def collect(self, stream, generate, n_prompts, generator, components):
        tracker = components["advantage"]
        if not hasattr(tracker, "sampling_weights"):
            raise ValueError(f"sampler spo_priority needs an advantage with sampling_weights (spo_tracker), "
                             f"got {tracker.registry_name!r}")
        examples, index = stream.next(int(n_prompts * self.candidates))
        weights = tracker.sampling_weights(torch.tensor(index)).double()
        pick = torch.multinomial(weights, n_prompts, replacement=False, generator=generator).tolist()
        return generate([examples[i] for i in pick], [index[i] for i in pick]), {}
