"""NLPO's action mask as a wrapper around the policy: every distribution the policy defines (the sampler's
next-token logits and the log-probs of a training forward) is restricted to the top-p nucleus of a masking
policy and renormalized, ``π̃(a|s) = π(a|s)·1[a ∈ N_p(ψ(·|s))] / Σ_b π(b|s)·1[b ∈ N_p(ψ(·|s))]``.

NLPO: "Is Reinforcement Learning (Not) for Natural Language Processing: Benchmarks, Baselines, and Building
Blocks for Natural Language Policy Optimization" (arXiv:2210.01241). The masking policy ψ is a frozen copy of
the policy refreshed every few steps (the ``masking_policy`` role, polo.roles.base).
"""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.action_mask import top_p_allow
from polo.policy.policy import Policy
from polo.policy.prefix import read_after_prompt


class MaskedDecoder:
    """The policy's and the masking policy's KV-cached decoders in lock-step; logits outside the nucleus: −inf."""

    def __init__(self, policy: "ActionMaskedPolicy"):
        self.inner, self.masking, self.allow = policy.inner_decoder(), policy.masking.decoder(), policy.allow

    @property
    def keep_hidden(self) -> bool:
        return self.inner.keep_hidden

    @keep_hidden.setter
    def keep_hidden(self, value: bool) -> None:
        self.inner.keep_hidden = value

    @property
    def new_tokens(self) -> int:
        return self.inner.new_tokens

    @new_tokens.setter
    def new_tokens(self, value: int) -> None:
        self.inner.new_tokens = self.masking.new_tokens = value

    @property
    def hidden(self):
        return self.inner.hidden

    def prefill(self, distinct) -> Tensor:
        return self.inner.prefill(distinct).masked_fill(~self.allow(self.masking.prefill(distinct)), float("-inf"))

    def step(self, inputs: dict[str, Tensor]) -> Tensor:
        return self.inner.step(inputs).masked_fill(~self.allow(self.masking.step(inputs)), float("-inf"))

    def select(self, keep: Tensor) -> None:
        self.inner.select(keep)
        self.masking.select(keep)


class ActionMaskedPolicy(Policy):
    """``policy`` (same model and parameters) with its action space restricted to ``masking``'s nucleus.

    ``masking`` is held outside the module tree: its weights are the masking role's, not the policy's, so
    ``parameters()`` and ``state_dict()`` are the wrapped policy's. In a training forward the mask is recomputed
    from ``masking`` on the same sequences; the token actually taken is always allowed, so a nucleus boundary
    that moved by a rounding difference between the cached and the full forward cannot give ``log 0``.
    """

    def __init__(self, policy: Policy, masking: Policy, top_p: float, min_tokens_to_keep: int = 1):
        super().__init__(policy.model, policy.tokenizer, chat_template=policy.chat_template,
                         compute_dtype=policy.compute_dtype)
        self.__dict__["masking"] = masking
        self.top_p, self.min_tokens_to_keep = top_p, min_tokens_to_keep
        self.pack_rows = policy.pack_rows
        self.always = torch.tensor(sorted({*self.stop_token_ids, self.pad_token_id}))
        self.masked_vocab_frac = 0.0
        """The share of the vocabulary masked at the (non-pad) response tokens of the last ``restrict``."""

    def allow(self, mask_logits: Tensor) -> Tensor:
        return top_p_allow(mask_logits, self.top_p, self.min_tokens_to_keep, self.always.to(mask_logits.device))

    def inner_decoder(self):
        return super().decoder()

    def decoder(self) -> MaskedDecoder:
        return MaskedDecoder(self)

    def restrict(self, logits: Tensor, prompt_ids: Tensor, prompt_mask: Tensor, response_ids: Tensor) -> Tensor:
        with torch.no_grad():
            mask_logits = read_after_prompt(self.masking.model, prompt_ids, prompt_mask, response_ids[:, :-1],
                                            lambda out: out.logits, lm_head=True)
            allow = self.allow(mask_logits[..., : logits.shape[-1]])
            allow.scatter_(-1, response_ids[..., None], True)
            tokens = response_ids != self.pad_token_id
            if bool(tokens.any()):
                self.masked_vocab_frac = float((~allow[tokens]).float().mean())
        return logits.masked_fill(~allow, float("-inf"))
