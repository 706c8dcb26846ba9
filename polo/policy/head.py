"""The language-model head on the response tokens only, in chunks: log-probs (and entropies) without ``[B, T, V]``.

A training forward needs, per response token ``t`` with hidden state ``h_t`` (the trunk's output at the position
that predicts it), only

    z = W h_t / τ,   log π(y_t) = z_{y_t} − logsumexp(z),   H_t = logsumexp(z) − Σ_v softmax(z)_v z_v.

Computing the head on the padded ``[B, T]`` layout spends ``2·d·V`` FLOPs on every padding position and keeps
``[B, T, V]`` logits (and the softmax the backward needs) alive through the backward: 1.1 GB at 32 rows × 274
positions of a 32k vocabulary. ``response_head_logp`` takes the N response tokens' hidden states ``[N, d]`` and
runs the head ``CHUNK_ELEMENTS / V`` tokens at a time; the backward recomputes each chunk's logits (one more
``[n, d] × [d, V]`` product per chunk) instead of keeping them, so at most one chunk's ``[n, V]`` lives at a time:

    ∂ log π(y)/∂z = onehot(y) − p,   ∂H/∂z = −p ⊙ (log p + H),   ∂/∂h = (∂/∂z) W / τ,   ∂/∂W = (∂/∂z)ᵀ h / τ.

The products run in the autocast dtype where one is active (as the plain head would), the softmax in float32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK_ELEMENTS = 1 << 22
"""Logits per chunk (4M: 16 MB in float32, 128 tokens of a 32k vocabulary)."""


def _compute_dtype(tensor: Tensor, weight: Tensor) -> torch.dtype:
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


def _logits(hidden: Tensor, weight: Tensor, dtype: torch.dtype, scale: float) -> Tensor:
    return F.linear(hidden.to(dtype), weight.to(dtype)).to(torch.promote_types(dtype, torch.float32)) * scale


class _ResponseHead(torch.autograd.Function):
    """``(logp [N], entropy [N])`` of ``softmax(scale · W h)`` at ``targets`` (module docstring)."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, scale: float, chunk: int,
                dtype: torch.dtype, with_entropy: bool) -> tuple[Tensor, Tensor]:
        logp = hidden.new_empty(len(hidden), dtype=torch.promote_types(dtype, torch.float32))
        entropy, lse = torch.zeros_like(logp), torch.empty_like(logp)
        for start in range(0, len(hidden), chunk):
            part = slice(start, start + chunk)
            z = _logits(hidden[part], weight, dtype, scale)
            lse[part] = z.logsumexp(-1)
            logp[part] = z.gather(-1, targets[part, None]).squeeze(-1) - lse[part]
            if with_entropy:
                entropy[part] = lse[part] - (z.sub(lse[part, None]).exp() * z).sum(-1)
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.scale, ctx.chunk, ctx.dtype = scale, chunk, dtype
        ctx.set_materialize_grads(False)  # an output that reaches no loss (a metric's entropy) gets None
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, grad_entropy: Tensor | None):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = lse.new_zeros(weight.shape) if ctx.needs_input_grad[1] else None
        for start in range(0, len(hidden), ctx.chunk):
            part = slice(start, start + ctx.chunk)
            log_p = _logits(hidden[part], weight, ctx.dtype, ctx.scale) - lse[part, None]
            p = log_p.exp()
            if grad_logp is None:
                grad_z = torch.zeros_like(p)
            else:
                grad_z = p * -grad_logp[part, None]
                grad_z.scatter_add_(-1, targets[part, None], grad_logp[part, None])
            if grad_entropy is not None:
                grad_z -= grad_entropy[part, None] * p * (log_p + entropy[part, None])
            grad_z = (grad_z * ctx.scale).to(ctx.dtype)
            if grad_hidden is not None:
                grad_hidden[part] = (grad_z @ weight.to(ctx.dtype)).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight += grad_z.t() @ hidden[part].to(ctx.dtype)
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None, None, None


def response_head_logp(hidden: Tensor, weight: Tensor, targets: Tensor, *, temperature: float = 1.0,
                       with_entropy: bool = False, chunk_elements: int = CHUNK_ELEMENTS) -> tuple[Tensor, Tensor]:
    """``(log π(targets) [N], H [N])`` (float32, or float64 for float64 weights) under ``softmax(hidden @ weightᵀ / temperature)``, ``hidden`` ``[N,
    d]``, ``weight`` ``[V, d]`` (a bias-free lm_head), ``targets`` ``[N]``; H is zeros unless ``with_entropy``. Both are
    differentiable with respect to ``hidden`` and ``weight``; no ``[N, V]`` tensor is kept for the backward."""
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: expected > 0")
    chunk = max(1, chunk_elements // weight.shape[0])
    return _ResponseHead.apply(hidden, weight, targets, 1.0 / temperature, chunk, _compute_dtype(hidden, weight),
                               with_entropy)
