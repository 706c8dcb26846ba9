"""Regularizers: loss terms beside the policy loss, each averaged over its own scope of tokens.

A regularizer adds ``coef · Σ_{b,t} u[b,t]·s[b,t] / Σ_{minibatch} s[b,t]`` to the loss, where ``u`` is its
per-token value (with gradient) and ``s = scope(batch)`` the tokens it averages over (no gradient; by default
every valid response token). The denominator is the scope's total over the whole minibatch, so accumulating
micro-batches gives the same step as one batch. A regularizer that reads the student's whole next-token
distribution (distillation) sets ``full_distribution`` and receives ``logprobs`` ``[B,T,V]`` (log-softmax at the
sampling temperature, with gradient).
"""
from __future__ import annotations

from typing import ClassVar

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput
from polo.core.registry import Component


class Regularizer(Component):
    """``(logp [B,T], batch, logprobs [B,T,V] | None) → LossOutput`` (``token_loss`` = u, with gradient)."""

    coef: float = Field(1.0, ge=0)
    """Weight of the term in the loss."""

    full_distribution: ClassVar[bool] = False
    """True: the updater passes the student's full log-softmax ``[B,T,V]`` as ``logprobs``."""

    def scope(self, batch: RolloutBatch) -> Tensor:
        """``[B,T]`` the tokens the term averages over (a function of the batch only, no gradient)."""
        return batch.mask

    def __call__(self, logp: Tensor, batch: RolloutBatch, logprobs: Tensor | None = None) -> LossOutput:
        raise NotImplementedError
