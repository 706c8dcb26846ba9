"""Log-densities and entropies of the action distributions control policies use."""
from __future__ import annotations

import math

import torch
from torch import Tensor

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def diag_gaussian_logp(a: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """``log N(a; μ, diag σ²) = Σ_j [−(a_j − μ_j)²/(2σ_j²) − log σ_j − ½ log 2π]`` over the last dim."""
    return (-0.5 * ((a - mean) * torch.exp(-log_std)) ** 2 - log_std - HALF_LOG_2PI).sum(-1)


def diag_gaussian_entropy(log_std: Tensor) -> Tensor:
    """``Σ_j (½ + ½ log 2π + log σ_j)`` over the last dim."""
    return (0.5 + HALF_LOG_2PI + log_std).sum(-1)


def categorical_logp(logits: Tensor, action: Tensor) -> Tensor:
    """``log softmax(z)_a`` of integer actions ``action`` (``logits`` ``[..., n]``, ``action`` ``[...]``)."""
    return torch.log_softmax(logits, -1).gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def categorical_entropy(logits: Tensor) -> Tensor:
    """``−Σ_a p_a log p_a`` over the last dim."""
    logp = torch.log_softmax(logits, -1)
    return -(logp.exp() * logp).sum(-1)


def bernoulli_logp(logits: Tensor, x: Tensor) -> Tensor:
    """``x·log σ(z) + (1 − x)·log(1 − σ(z))`` elementwise."""
    return -torch.nn.functional.binary_cross_entropy_with_logits(logits, x.to(logits), reduction="none")


def bernoulli_entropy(logits: Tensor) -> Tensor:
    """``−p log p − (1 − p) log(1 − p)``, p = σ(z), elementwise."""
    p = torch.sigmoid(logits)
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, p, reduction="none")
