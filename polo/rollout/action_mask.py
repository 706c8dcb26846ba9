"""NLPO's masking policy run in lockstep with the sampler (its own KV cache), yielding per-step masks."""
from __future__ import annotations

import torch
from torch import Tensor
from polo.core.action_mask import top_p_allow
from polo.policy.policy import Policy
from polo.policy.prefix import CACHE_ARG, new_cache, prefill


class NucleusActionMask:
    """At each decoding step: ``allow = top-p nucleus of π_mask(·|s_t)`` (polo.core.action_mask).

    ``mask_policy`` is a frozen copy of the policy that the trainer refreshes every few steps.
    """

    def __init__(self, mask_policy: Policy, top_p: float, min_tokens_to_keep: int = 1):
        self.policy, self.top_p, self.min_keep = mask_policy, top_p, min_tokens_to_keep
        self.always = torch.tensor(sorted({*mask_policy.stop_token_ids, mask_policy.pad_token_id}))
        self.cache = None

    def prefill(self, distinct: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """Start a batch from ``polo.policy.prefix.distinct_prompts``' output: the mask of the first token."""
        self.cache = new_cache(self.policy.hf_model)
        logits = prefill(self.policy.model, distinct, self.cache, logits_to_keep=1).logits[:, -1][distinct[2]]
        return self.allow(logits)

    def step(self, inputs: dict[str, Tensor]) -> Tensor:
        """The mask of the next token, given the sampler's one-token ``inputs``."""
        return self.allow(self.policy.model(**inputs, use_cache=True, logits_to_keep=1,
                                            **{CACHE_ARG: self.cache}).logits[:, -1])

    def allow(self, logits: Tensor) -> Tensor:
        return top_p_allow(logits, self.top_p, self.min_keep, self.always.to(logits.device))

    def select(self, keep: Tensor) -> None:
        self.cache.batch_select_indices(keep)
