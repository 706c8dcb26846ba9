"""PRIME's implicit process rewards as an input: "Process Reinforcement through Implicit Rewards"
(arXiv:2502.01456)."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.engines.base import Rollouts
from polo.inputs.base import ProviderContext, register_provider


@register_provider("process_rewards", roles={"implicit_prm", "reference"})
@torch.no_grad()
def process_rewards(ctx: ProviderContext, rollouts: Rollouts) -> dict[str, Tensor]:
    """``process_rewards`` ``[B,T]``: ``r_t = β·(log π_φ − log π_ref)(y_t)`` of each response token under the
    implicit PRM (``implicit_prm``) as it is before this step's update, and ``ref_logp`` ``[B,T]``, the frozen
    reference's log-probs, which the PRM's loss reads in the update. Providers run in the sorted order of the
    names they serve, so this one runs before ``ref_logp``'s: when another component needs ``ref_logp`` too, the
    reference provider writes it again, with the same values."""
    batch = rollouts.batch
    ref_logp = ctx.models["reference"].forward_logp(batch.prompt_ids, batch.prompt_mask, batch.response_ids,
                                                    batch.response_mask, temperature=ctx.temperature)["logp"]
    return {"process_rewards": ctx.models["implicit_prm"](batch, ref_logp, ctx.temperature), "ref_logp": ref_logp}
