"""NLPO's action mask: the vocabulary restricted to a masking policy's top-p nucleus. NLPO: "Is Reinforcement
Learning (Not) for Natural Language Processing: Benchmarks, Baselines, and Building Blocks for Natural
Language Policy Optimization" (arXiv:2210.01241); the nucleus rule follows RL4LMs' masked logits processor.

``allow = top-p nucleus of ψ = softmax(mask_logits)``: tokens sorted by ψ, the cumulative mass C, removal
flags ``C > p`` shifted right by one so that the token crossing ``p`` stays, the first ``min_tokens_to_keep``
always kept, ``always_allowed`` ids (BOS/EOS/pad) always kept. The policy is renormalized over the allowed set,
``π̃(a) = π(a)·allow / Σ_b π(b)·allow`` (``masked_log_softmax``), for sampling and for every log-prob, ratio
and entropy of the update (polo.policy.action_mask.ActionMaskedPolicy applies it).
"""
from __future__ import annotations

import torch
from torch import Tensor


def top_p_allow(mask_logits: Tensor, top_p: float, min_tokens_to_keep: int = 1,
                always_allowed: Tensor | None = None) -> Tensor:
    """Bool ``[..., V]``: tokens inside the masking policy's top-p nucleus."""
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    probs, order = mask_logits.float().softmax(-1).sort(-1, descending=True)
    remove = probs.cumsum(-1) > top_p
    remove = torch.cat([torch.zeros_like(remove[..., :1]), remove[..., :-1]], -1)  # keep the crossing token
    remove[..., :max(1, min_tokens_to_keep)] = False
    allow = torch.zeros_like(remove).scatter(-1, order, ~remove)
    if always_allowed is not None and always_allowed.numel():
        allow[..., always_allowed] = True
    return allow


def masked_log_softmax(logits: Tensor, allow: Tensor | None) -> Tensor:
    """``log π̃ = log_softmax(logits)`` renormalized over ``allow`` (−inf outside); no mask: plain."""
    if allow is None:
        return logits.log_softmax(-1)
    return logits.masked_fill(~allow, float("-inf")).log_softmax(-1)
