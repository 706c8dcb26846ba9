"""Preference pairs in the pipeline: the ``preference_pairs`` engine (a file's chosen and rejected responses,
no sampling), the ``chosen`` provider (online pairs labelled by the reward) and the ``history_logp`` provider
(MNPO/INPO's opponents).

Every pair is one group of two rows and ``extras["chosen"]`` is 1.0 on its preferred row, what the pairwise
losses (``dpo``, ``ipo``, ``mnpo``, ``oppo``) read.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.registry import ConfigError
from polo.core.segment import segment_sum
from polo.rollout.engine import ENGINES, Engine, Rollouts, scored
from polo.rollout.prompt_samplers import group_reward_spread
from polo.rollout.providers import ProviderContext, register_provider
from polo.tasks.base import Example


@ENGINES.register("preference_pairs")
class PreferencePairs(Engine):
    """Replays preference pairs: each prompt yields two rows, its ``chosen`` response then its ``rejected`` one
    (the examples' columns: task ``preference_pairs``), one group per pair; nothing is sampled. The responses are
    tokenized as completions (with the end-of-sequence token), ``old_logp`` comes from one no-grad forward of
    the policy, ``extras["chosen"]`` is ``[1, 0]`` per pair, and the rows are scored by the task's rewards like
    any engine's (so reward and accuracy metrics read the chosen and rejected responses). Held-out evaluation
    samples greedily as usual."""

    provides = Engine.provides | {"chosen"}
    group_size = 2

    def rollout(self, policy, examples: list[Example], prompt_index: list[int], generator: torch.Generator, *,
                samples_per_prompt: int | None = None, greedy: bool = False) -> Rollouts:
        if greedy or (samples_per_prompt or 2) != 2:
            raise ConfigError(f"engine preference_pairs replays a file's pairs (2 rows per prompt, nothing sampled); "
                              f"it cannot give samples_per_prompt={samples_per_prompt}, greedy={greedy} (a component "
                              f"that samples its own rollouts needs a sampling engine such as single_turn)")
        lacking = [e.prompt for e in examples if "chosen" not in e.columns or "rejected" not in e.columns]
        if lacking:
            raise ConfigError(f"engine preference_pairs needs examples with 'chosen' and 'rejected' columns (task "
                              f"preference_pairs); {len(lacking)} have none, e.g. the prompt {lacking[0][:60]!r}")
        s = self.settings
        prompt_ids, prompt_mask = policy.encode_prompts(examples)
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(2, 0), prompt_mask.repeat_interleave(2, 0)
        texts = [e.columns[side] for e in examples for side in ("chosen", "rejected")]
        response_ids, response_mask = policy.encode_completions(texts)
        with torch.no_grad():
            old = policy.forward_logp(prompt_ids, prompt_mask, response_ids, response_mask,
                                      temperature=s.temperature)["logp"]
        rows = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "response_ids": response_ids,
                "response_mask": response_mask, "group": torch.arange(len(examples)).repeat_interleave(2),
                "old_logp": old, "extras": {"chosen": torch.tensor([1.0, 0.0]).repeat(len(examples))}}
        repeated = [e for e in examples for _ in range(2)]
        index = [i for i in prompt_index for _ in range(2)]
        return scored(rows, s, repeated, policy.decode(response_ids, response_mask), index)


@register_provider("chosen", "pair_valid")
def chosen_by_reward(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """Online pairs (two sampled completions per prompt, e.g. online DPO on ``single_turn`` with
    ``rollout.samples_per_prompt: 2``): ``chosen`` is 1.0 on the row with the higher scalar reward; when the two
    rewards tie (or one is NaN) both rows get ``chosen`` 0 and ``pair_valid`` 0, so the pair contributes
    nothing. A ConfigError when a group is not two rows."""
    batch = rollouts.batch
    reward = batch.scalar_reward()
    _, inv = torch.unique(batch.group, return_inverse=True)
    size = segment_sum(torch.ones_like(reward), inv)
    if bool((size != 2).any()):
        raise ConfigError(f"the chosen input labels pairs: every group must hold 2 rows (rollout.samples_per_prompt: "
                          f"2), got group sizes {sorted(set(size.long().tolist()))}")
    high = torch.full_like(size, -torch.inf).scatter_reduce(0, inv, reward, "amax")
    valid = (group_reward_spread(reward, batch.group) > 0)[inv]
    return {"chosen": ((reward == high[inv]) & valid).float(), "pair_valid": valid.float()}


@register_provider("history_logp", roles={"history"})
@torch.no_grad()
def history_logp(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``history_logp`` ``[B, H]``: each response's log-likelihood (the sum of its token log-probs) under each
    model of the ``history`` role, most recent first; a slot not filled yet holds the initial policy, so it gives
    the reference's log-likelihood."""
    batch = rollouts.batch
    columns = [model.forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
                                  temperature=ctx.temperature)["logp"].sum(-1)
               for model in ctx.models["history"].snapshots]
    return {"history_logp": torch.stack(columns, 1)}
