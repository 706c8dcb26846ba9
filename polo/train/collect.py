"""Rollout collection: prompts → G completions each → scored RolloutBatch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from polo.core.batch import RolloutBatch, concat_batches
from polo.policy.policy import Policy
from polo.rollout.sampler import sample
from polo.tasks.base import Example, Task
from polo.tasks.rewards import RewardSpec, score
from polo.train.config import Rollout


@dataclass
class Collected:
    """A scored batch plus what only the trainer needs: texts and the (repeated) examples."""

    batch: RolloutBatch
    completions: list[str]
    examples: list[Example]

    @property
    def correct(self) -> torch.Tensor:
        return self.batch.extras["correct"].bool()

    def select_groups(self, keep_group: torch.Tensor) -> "Collected":
        """The rows of the groups where ``keep_group[g]`` is true; kept groups are renumbered 0..k−1."""
        rows = keep_group[self.batch.group]
        idx = rows.nonzero().squeeze(-1).tolist()
        batch = self.batch.select(rows)
        batch.group = torch.unique(batch.group, return_inverse=True)[1]
        return Collected(batch, [self.completions[i] for i in idx], [self.examples[i] for i in idx])

    @staticmethod
    def concat(parts: list["Collected"]) -> "Collected":
        return Collected(concat_batches([p.batch for p in parts]), [c for p in parts for c in p.completions],
                         [e for p in parts for e in p.examples])


def collect(
    policy: Policy,
    task: Task,
    reward_specs: list[RewardSpec],
    examples: list[Example],
    prompt_index: list[int],
    rollout: Rollout,
    max_new_tokens: int,
    generator: torch.Generator,
    samples_per_prompt: int | None = None,
    greedy: bool = False,
    action_mask=None,
) -> Collected:
    """Sample ``samples_per_prompt`` completions for each example (consecutive rows form a group).

    ``prompt_index`` (the examples' positions in the training pool) and the verifier's ``correct`` go
    to ``batch.extras``."""
    G = samples_per_prompt or rollout.samples_per_prompt
    prompt_ids, prompt_mask = policy.encode_prompts([e.prompt for e in examples])
    prompt_ids = prompt_ids.repeat_interleave(G, 0)
    prompt_mask = prompt_mask.repeat_interleave(G, 0)
    repeated = [e for e in examples for _ in range(G)]
    out = sample(
        policy,
        prompt_ids,
        prompt_mask,
        max_new_tokens=max_new_tokens,
        temperature=rollout.temperature,
        top_p=rollout.top_p,
        top_k=rollout.top_k,
        greedy=greedy,
        generator=generator,
        action_mask=action_mask,
    )
    completions = policy.decode(out.response_ids, out.response_mask)
    rewards, names, weights = score(task, reward_specs, repeated, completions)
    correct = torch.tensor([float(task.is_correct(c, e)) for c, e in zip(completions, repeated)])
    batch = RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=out.response_ids,
        response_mask=out.response_mask,
        group=torch.arange(len(examples)).repeat_interleave(G),
        rewards=rewards,
        reward_names=names,
        reward_weights=weights,
        truncated=out.truncated,
        old_logp=out.logp,
        extras={"correct": correct, "prompt_index": torch.tensor(prompt_index).repeat_interleave(G)},
    )
    if out.allow is not None:
        batch.extras["allow"] = out.allow
    return Collected(batch, completions, repeated)
