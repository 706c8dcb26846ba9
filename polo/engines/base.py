"""Rollout engines: a policy and task examples → a scored ``RolloutBatch`` (the ``Engine`` stage).

An engine is a registered component (``engine.name`` in a recipe, default ``single_turn``). The trainer
builds it once, hands it what every engine needs (``EngineSetup``), calls ``rollout`` each step, ``before_update``
before and ``sync`` after each update (an engine that generates elsewhere, e.g. in vLLM or on Ray workers, frees
its memory for the update and pushes the new weights there) and ``close`` when the run ends. An engine names the
inputs it writes itself (``provides``: at least ``old_logp``) and the model roles it needs besides the policy
(``roles``). Every engine decodes through ``generate``: polo's
KV-cache sampler, or vLLM when the engine's ``vllm`` settings are given (``engine.name: vllm`` is the
single-turn engine with vLLM on).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
from pydantic import PrivateAttr

from polo.core.batch import RolloutBatch, concat_batches
from polo.core.registry import METHODS, Component, ConfigError, Registry
from polo.engines.accuracy import accuracy
from polo.engines.sampler import SampleOutput, sample
from polo.engines.vllm_generator import VLLMGenerator, VLLMSettings
from polo.tasks.base import Example, Task
from polo.tasks.reward_calls import RewardContext
from polo.tasks.rewards import RewardSpec, reward_maxima, score_batch

ENGINES: Registry = Registry("engine", ("polo.engines", METHODS), default="single_turn")


@dataclass
class EngineSetup:
    """What every engine is given once: the task, its reward components, the sampling settings and the run's
    ``RewardContext`` (``trainer_state`` and ``log_metric`` of every reward call; the trainer owns it) and the
    role models."""

    task: Task
    reward_specs: list[RewardSpec]
    samples_per_prompt: int
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    reward_context: RewardContext = field(default_factory=RewardContext)
    models: dict[str, Any] = field(default_factory=dict)
    """The built role models, by role name (those the engine named in ``roles()`` among them)."""
    scorer: Callable | None = None
    """Scores completions in place of ``score_batch`` (same signature): Ray reward workers; None: here."""


@dataclass
class Rollouts:
    """A scored batch plus what only the host side needs: the completions' texts and the (repeated) examples,
    one per row."""

    batch: RolloutBatch
    completions: list[str]
    examples: list[Example]
    turns: list | None = None
    """Multi-turn engines: the host-side ``TurnRecord`` of every row (``polo.engines.episodes``)."""

    @property
    def correct(self) -> torch.Tensor:
        return self.batch.extras["correct"].bool()

    def select_groups(self, keep_group: torch.Tensor) -> "Rollouts":
        """The rows of the groups where ``keep_group[g]`` is true; kept groups are renumbered 0..k−1."""
        rows = keep_group[self.batch.group]
        idx = rows.nonzero().squeeze(-1).tolist()
        batch = self.batch.select(rows)
        batch.group = torch.unique(batch.group, return_inverse=True)[1]
        turns = None if self.turns is None else [self.turns[i] for i in idx]
        return Rollouts(batch, [self.completions[i] for i in idx], [self.examples[i] for i in idx], turns)

    @staticmethod
    def concat(parts: list["Rollouts"]) -> "Rollouts":
        turns = None if any(p.turns is None for p in parts) else [t for p in parts for t in p.turns]
        return Rollouts(concat_batches([p.batch for p in parts]), [c for p in parts for c in p.completions],
                        [e for p in parts for e in p.examples], turns)


def scored(batch_fields: dict, setup: EngineSetup, examples: list[Example], completions: list[str],
           prompt_index: list[int]) -> Rollouts:
    """A ``Rollouts`` from generated rows (``batch_fields``: the RolloutBatch tensors) and their texts: every
    reward component scored (given each completion's token ids), the verifier's ``correct``, the pool's
    ``prompt_index`` and ``reward_present`` ``[B, K]`` (False where a reward returned None) in ``extras``."""
    ids, mask = batch_fields["response_ids"], batch_fields["response_mask"].bool()
    completion_ids = [row.tolist() for row in ids[mask].split(mask.sum(1).tolist())]
    score = setup.scorer or score_batch
    scores = score(setup.task, setup.reward_specs, examples, completions, completion_ids, setup.reward_context)
    maxima = reward_maxima(setup.task, setup.reward_specs)
    correct = torch.tensor([float(setup.task.is_correct(c, e)) for c, e in zip(completions, examples)])
    extras = {"correct": correct, "prompt_index": torch.tensor(prompt_index, dtype=torch.long),
              "reward_present": scores.present, **batch_fields.pop("extras", {})}
    batch = RolloutBatch(rewards=scores.values, reward_names=scores.names, reward_weights=scores.weights,
                         reward_max=maxima, extras=extras, **batch_fields)
    return Rollouts(batch, completions, examples)


class Engine(Component):
    """Turns a policy and task examples into scored rollouts; built once per run."""

    provides: ClassVar[frozenset[str]] = frozenset({"old_logp", "correct", "prompt_index", "reward_present"})
    """Inputs the engine writes into every batch itself (behaviour log-probs, the verifier's verdict, ...)."""

    policy_kinds: ClassVar[frozenset[str]] = frozenset({"causal"})
    """The policy kinds (``model.kind``, polo.policy.kinds) the engine can roll out."""

    vllm: VLLMSettings | None = None
    """Decode in vLLM with these settings (the optional extra polo[vllm]); None: polo's own sampler."""

    _setup: EngineSetup | None = PrivateAttr(default=None)
    _vllm: VLLMGenerator | None = PrivateAttr(default=None)

    def roles(self) -> set[str]:
        """Model roles the engine needs besides the policy."""
        return set()

    def setup(self, setup: EngineSetup) -> None:
        self._setup = setup

    @property
    def settings(self) -> EngineSetup:
        if self._setup is None:
            raise RuntimeError(f"engine {self.registry_name!r} was not set up: call setup(EngineSetup(...)) first")
        return self._setup

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        """``samples_per_prompt`` (default: the recipe's) scored samples of each example; consecutive rows form
        a group, ``extras["prompt_index"]`` holds each row's index in the training pool."""
        raise NotImplementedError

    def evaluate(self, policy, examples: list[Example]) -> float:
        """Held-out success: the fraction of ``examples`` the policy solves greedily (here: the task's verifier on
        one greedy completion each; an engine of episodes counts solved episodes)."""
        s = self.settings
        return accuracy(policy, s.task, examples, s.max_new_tokens, greedy=True, generate=self.generate)

    def evaluation_metrics(self) -> dict[str, float]:
        """Further held-out metrics of the last ``evaluate`` call, logged as ``eval/<name>`` (with data-parallel
        learners, rank 0's share of the examples); none here."""
        return {}

    def generate(self, policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, **sampling) -> SampleOutput:
        """Completions of left-padded prompts (``sampling``: ``polo.engines.sampler.sample``'s keywords), from
        polo's sampler or from vLLM (built on first use from the policy's current weights); the task's tool, if it
        declares one, runs during polo's sampling (polo.engines.tool_use)."""
        tool = self._setup.task.tool() if self._setup is not None else None
        if tool is not None and self.vllm is not None:
            raise ConfigError(f"engine {self.registry_name!r}: task {self._setup.task.name!r} runs its tool during "
                              f"generation, which vLLM decoding does not do: drop engine.vllm or turn the task's "
                              f"tool off")
        if self.vllm is None:
            return sample(policy, prompt_ids, prompt_mask, tool=tool, **sampling)
        if sampling.pop("inputs", None):
            raise ConfigError(f"engine {self.registry_name!r}: vLLM decoding takes token prompts only, but this policy "
                              f"kind's prompts carry {', '.join(policy.input_names)}: drop engine.vllm")
        if self._vllm is None:
            self._vllm = VLLMGenerator(self.vllm, policy)
        return self._vllm.generate(policy, prompt_ids, prompt_mask, **sampling)

    def before_update(self) -> None:
        """Before each policy update: free generation's memory where it can (vLLM's ``sleep``; it wakes on the next
        ``sync`` or generation)."""
        if self._vllm is not None:
            self._vllm.before_update()

    def sync(self, policy, version: int) -> None:
        """After each update (``version`` = completed steps): push the new weights where generation runs."""
        if self._vllm is not None:
            self._vllm.sync(policy, version)

    def close(self) -> None:
        """Release what generation holds (vLLM's folders, the vLLM server polo started); the next generation
        builds it again."""
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None
