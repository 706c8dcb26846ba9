"""Token entropy of the policy over the full vocabulary."""
from __future__ import annotations

import torch
from torch import Tensor


def entropy_from_logits(logits: Tensor, chunk_size: int | None = None) -> Tensor:
    """``H = −Σ_v p_v log p_v`` with ``log p = log_softmax(logits)``, ``[..., V] → [...]``, at least float32.

    Stable for large and −inf logits (tokens with p = 0 contribute 0, with zero gradient).
    ``chunk_size`` bounds the float32 work copy to ``chunk_size`` positions at a time.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    chunks = flat.split(chunk_size) if chunk_size else (flat,)
    out = []
    for chunk in chunks:
        logp = torch.log_softmax(chunk.to(torch.promote_types(chunk.dtype, torch.float32)), dim=-1)
        out.append(-(logp.exp() * torch.where(torch.isneginf(logp), 0.0, logp)).sum(-1))
    return torch.cat(out).reshape(logits.shape[:-1])
