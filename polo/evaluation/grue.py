"""GRUE-style evaluation: task score, naturalness and diversity of a policy on held-out prompts.

"Is Reinforcement Learning (Not) for Natural Language Processing: Benchmarks, Baselines, and Building Blocks
for Natural Language Policy Optimization" (RL4LMs / GRUE, arXiv:2210.01241) scores a policy by reward
functions rather than by target strings, and always reports three groups of metrics, so that a reward gained
by drifting into unnatural or repetitive text shows:

- task: the verifier's accuracy and each reward component's mean (over the samples it scores), on greedy
  completions (one per prompt) and on sampled ones (``samples`` per prompt, the run's temperature);
- naturalness: the perplexity of the completions under a reference LM, per token over all of them,
  ``ppl = exp(−Σ_i Σ_t log π_ref(y_it | x_i, y_i<t) / Σ_i |y_i|)``, each completion followed by eos as the
  reference's tokenizer encodes it (so a reference with another tokenizer scores the same texts);
- diversity: ``polo.core.diversity`` over the sampled completions, in words or characters (``unit``).

An ``EvalSuite`` lists its metrics as ``EvalMetric(name, higher_is_better, kind)``; ``higher_is_better`` is
None for a metric without a preferred direction (the mean length).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from polo.core.diversity import UNITS, Unit, diversity, metric_names
from polo.core.registry import ConfigError
from polo.policy.policy import Policy
from polo.engines.accuracy import completions
from polo.engines.sampler import sample
from polo.tasks.base import Example, Task
from polo.tasks.rewards import RewardSpec, score_batch

Kind = Literal["task", "naturalness", "diversity"]
KINDS: tuple[Kind, ...] = ("task", "naturalness", "diversity")
DIVERSITY_ORDERS = (1, 2)
MODES = ("greedy", "sampled")


@dataclass(frozen=True)
class EvalMetric:
    name: str
    higher_is_better: bool | None
    """None: no preferred direction."""
    kind: Kind


@dataclass
class Generations:
    """Completions of the examples (one row each): texts and generated token ids (stop token included)."""

    examples: list[Example]
    texts: list[str]
    ids: list[list[int]]


def generate(policy: Policy, examples: list[Example], max_new_tokens: int, **sampling) -> Generations:
    """``polo.engines.accuracy.completions`` of ``examples`` (``sampling``: its keywords), with their token ids."""
    outputs = []

    def recorded(*args, **kwargs):
        outputs.append(sample(*args, **kwargs))
        return outputs[-1]

    texts = completions(policy, examples, max_new_tokens, generate=recorded, **sampling)
    ids = [row[mask.bool()].tolist() for out in outputs for row, mask in zip(out.response_ids, out.response_mask)]
    return Generations(list(examples), texts, ids)


@torch.no_grad()
def perplexity(reference: Policy, examples: list[Example], texts: list[str], chunk: int = 256) -> float:
    """``exp(−mean log π_ref)`` over every token of ``texts`` (each followed by eos) given its example's prompt. A
    diffusion-LM reference gives its per-position ELBO terms, so the figure is then ``exp(−ELBO / tokens)``, an
    upper bound on its perplexity."""
    total, count = 0.0, 0
    for start in range(0, len(texts), chunk):
        part = examples[start : start + chunk]
        prompt_ids, prompt_mask = reference.encode_prompts(part)
        ids, mask = reference.encode_completions(texts[start : start + chunk])
        logp = reference.forward_logp(prompt_ids, prompt_mask, ids, mask, **reference.prompt_inputs(part))["logp"]
        if logp.shape != mask.shape:
            raise ConfigError(f"perplexity needs the reference's per-token log-probs, but {type(reference).__name__} "
                              f"scores whole sequences (log-probs of shape {tuple(logp.shape)}): give a causal LM "
                              f"as the reference (--reference PATH)")
        mask = mask.to(logp)
        total += float((logp * mask).sum())
        count += int(mask.sum())
    if not math.isfinite(total):
        raise ValueError(f"perplexity: the reference gave non-finite log-probs (sum {total})")
    return math.exp(-total / count)


class EvalSuite:
    """Task, naturalness and diversity metrics of a policy on held-out ``examples`` (see the module docstring).

    ``rewards``: the reward components (at least one); ``reference``: the LM that scores naturalness;
    ``samples``: sampled completions per prompt; ``temperature`` and ``seed``: their sampling; ``unit`` and
    ``window``: the diversity tokens (words or characters) and the MSTTR window."""

    def __init__(self, task: Task, rewards: list[RewardSpec], reference: Policy, max_new_tokens: int, *,
                 samples: int = 4, temperature: float = 1.0, seed: int = 0, window: int = 100,
                 unit: Unit = "words"):
        if not rewards:
            raise ConfigError("EvalSuite: no reward components to score completions with (expected at least one)")
        if samples < 1:
            raise ConfigError(f"EvalSuite: samples must be at least 1 per prompt, got {samples}")
        if not temperature > 0:
            raise ConfigError(f"EvalSuite: the sampling temperature must be > 0, got {temperature}")
        if unit not in UNITS:
            raise ConfigError(f"EvalSuite: the diversity unit must be one of {list(UNITS)}, got {unit!r}")
        self.task, self.rewards, self.reference = task, [RewardSpec.of(r) for r in rewards], reference
        self.max_new_tokens, self.samples, self.temperature, self.seed = max_new_tokens, samples, temperature, seed
        self.window, self.unit = window, unit

    def metrics(self) -> list[EvalMetric]:
        """Every metric ``evaluate`` returns, in table order."""
        task = [EvalMetric(f"{mode}/{name}", True, "task") for mode in MODES
                for name in ("accuracy", *(r.name for r in self.rewards))]
        natural = [EvalMetric(f"{mode}/perplexity", False, "naturalness") for mode in MODES]
        diverse = [EvalMetric(name, None if name == "mean_length" else True, "diversity")
                   for name in metric_names(DIVERSITY_ORDERS, self.window)]
        return task + natural + diverse

    def evaluate(self, policy: Policy, examples: list[Example]) -> dict[str, float | None]:
        """``{metric name: value}`` (None where undefined: a reward that scored no sample, MSTTR with fewer
        tokens than its window) of ``policy`` on ``examples``."""
        if not examples:
            raise ConfigError("EvalSuite: no held-out examples to evaluate on")
        repeated = [e for e in examples for _ in range(self.samples)]
        runs = {"greedy": generate(policy, list(examples), self.max_new_tokens, greedy=True),
                "sampled": generate(policy, repeated, self.max_new_tokens, greedy=False,
                                    temperature=self.temperature, seed=self.seed)}
        values: dict[str, float | None] = {}
        for mode, gen in runs.items():
            values[f"{mode}/accuracy"] = sum(self.task.verify(gen.texts, gen.examples)) / len(gen.texts)
            scores = score_batch(self.task, self.rewards, gen.examples, gen.texts, gen.ids)
            present = scores.present.sum(0)
            means = (scores.values.double() * scores.present).sum(0) / present.clamp_min(1)
            for name, mean, n in zip(scores.names, means.tolist(), present.tolist()):
                values[f"{mode}/{name}"] = mean if n else None
        for mode, gen in runs.items():
            values[f"{mode}/perplexity"] = perplexity(self.reference, gen.examples, gen.texts)
        for name, value in diversity(runs["sampled"].texts, DIVERSITY_ORDERS, self.window, self.unit).items():
            values[name] = None if math.isnan(value) else value
        return values
