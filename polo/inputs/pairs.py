"""Inputs of the pairwise losses: ``chosen`` for online pairs labelled by the reward, and ``history_logp``
(MNPO/INPO's opponents). Every pair is one group of two rows and ``chosen`` is 1.0 on its preferred row, what the
pairwise losses (``dpo``, ``ipo``, ``mnpo``, ``oppo``) read; the ``preference_pairs`` engine writes it itself.
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.registry import ConfigError
from polo.core.segment import group_reward_spread, segment_sum
from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider


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
