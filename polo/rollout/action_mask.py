"""NLPO's masking policy run in lockstep with the sampler (its own KV cache), yielding per-step masks."""
from __future__ import annotations

import torch
from torch import Tensor
from transformers import DynamicCache

from polo.core.action_mask import top_p_allow
from polo.policy.policy import Policy


class NucleusActionMask:
    """At each decoding step: ``allow = top-p nucleus of π_mask(·|s_t)`` (polo.core.action_mask).

    ``mask_policy`` is a frozen copy of the policy that the trainer refreshes every few steps.
    """

    def __init__(self, mask_policy: Policy, top_p: float, min_tokens_to_keep: int = 1):
        self.policy, self.top_p, self.min_keep = mask_policy, top_p, min_tokens_to_keep
        self.always = torch.tensor(sorted({*mask_policy.stop_token_ids, mask_policy.pad_token_id}))
        self.cache = None

    def reset(self) -> None:
        self.cache = DynamicCache(config=self.policy.hf_model.config)

    def __call__(self, inputs: dict[str, Tensor], attention: Tensor, cache_arg: str) -> Tensor:
        logits = self.policy.model(**inputs, attention_mask=attention, use_cache=True, logits_to_keep=1,
                                   **{cache_arg: self.cache}).logits[:, -1]
        return top_p_allow(logits, self.top_p, self.min_keep, self.always.to(logits.device))

    def select(self, keep: Tensor) -> None:
        self.cache.batch_select_indices(keep)
