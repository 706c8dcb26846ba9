"""Distillation math on next-token distributions given as log-probabilities over their last dimension.

Student ``s`` and teacher ``t`` live on one support: the whole vocabulary ``[..., V]``, or the teacher's top-k
token ids plus one tail bin holding the rest of the mass, ``[..., k+1]`` (``on_common_support``).

Generalized Jensen-Shannon divergence with teacher weight β ∈ [0, 1] (the convention of "On-Policy
Distillation of Language Models: Learning from Self-Generated Mistakes", arXiv:2306.13649, and of TRL's GKD):

    M = β·t + (1 − β)·s,      JSD_β(t ‖ s) = β·KL(t ‖ M) + (1 − β)·KL(s ‖ M).

JSD_β/β → KL(t ‖ s) (forward KL) as β → 0 and JSD_β/(1 − β) → KL(s ‖ t) (reverse KL) as β → 1, so the end
points are defined as those limits: β = 0 is KL(t ‖ s), β = 1 is KL(s ‖ t).

The SRPO/SDPO weight α (``M = (1−α)p + αq``, ``(1−α)KL(p‖M) + αKL(q‖M)``, p the student, q the teacher) and
the KEPO/GKD weight β (``M = (1−β)p_s + βp_t``, ``βKL(p_t‖M) + (1−β)KL(p_s‖M)``) are both this β: the weight
of the *teacher* in the mixture; 0 is forward KL(teacher ‖ student), 1 reverse KL(student ‖ teacher).

``teacher_ids`` reads a batch's top-k teacher ids (None when the teacher's distributions are whole).

Log-probabilities are clamped at ``LOG_FLOOR`` (probability 0 in float32 and float64), so a token one side
excludes (−inf) adds exactly 0·log 0 = 0 and no NaN reaches the gradient.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from polo.core.batch import RolloutBatch

LOG_FLOOR = -1e4
"""Smallest log-probability the math sees: exp(−1e4) is 0 in float32 and float64."""


def tail_logprob(top: Tensor) -> Tensor:
    """``log(1 − Σ_k exp(top_k))`` over the last dim: the log-mass outside the top-k entries, computed as
    ``log(−expm1(logsumexp(top)))`` (exact for a small top-k mass; a tail of mass ε near 0 keeps the relative
    error of ``logsumexp``, the cancellation inherent to ``1 − Σ``). When the top-k hold all the mass (or, by
    rounding, more) the tail is the log of the dtype's smallest normal number (−87.3 in float32), not −inf."""
    rest = -torch.expm1(torch.logsumexp(top, -1))
    return torch.log(rest.clamp_min(torch.finfo(rest.dtype).tiny))


def with_tail(top: Tensor) -> Tensor:
    """``[..., k]`` top-k log-probabilities → ``[..., k+1]`` with the tail bin appended (sums to 1)."""
    return torch.cat([top, tail_logprob(top)[..., None]], -1)


def kl(logp: Tensor, logq: Tensor) -> Tensor:
    """``KL(p ‖ q) = Σ_v p(v)·(log p(v) − log q(v))`` over the last dim (0·log 0 = 0)."""
    logp, logq = logp.clamp_min(LOG_FLOOR), logq.clamp_min(LOG_FLOOR)
    return (logp.exp() * (logp - logq)).sum(-1)


def generalized_jsd(student: Tensor, teacher: Tensor, beta: float) -> Tensor:
    """``JSD_β(t ‖ s) = β·KL(t ‖ M) + (1 − β)·KL(s ‖ M)``, ``M = β·t + (1 − β)·s`` (see the module docstring):
    β = 0 gives KL(teacher ‖ student), β = 1 gives KL(student ‖ teacher). Log-probs over the last dim."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return kl(teacher, student)
    if beta == 1.0:
        return kl(student, teacher)
    student, teacher = student.clamp_min(LOG_FLOOR), teacher.clamp_min(LOG_FLOOR)
    mixture = torch.logaddexp(teacher + math.log(beta), student + math.log1p(-beta))
    return beta * kl(teacher, mixture) + (1 - beta) * kl(student, mixture)


def entropy(logp: Tensor) -> Tensor:
    """``H(p) = −Σ_v p(v)·log p(v)`` over the last dim (0·log 0 = 0)."""
    logp = logp.clamp_min(LOG_FLOOR)
    return -(logp.exp() * logp).sum(-1)


def fill_invalid(logp: Tensor, valid: Tensor, vocab: int | None = None) -> Tensor:
    """``logp`` ``[B,T,n]`` with the positions where ``valid`` ``[B,T]`` is 0 set to ``−log vocab`` (default n):
    the uniform distribution over the vocabulary, or its top-k entries. Padding (whose log-probs polo stores as
    0) and rows without a teacher then compute to finite values and gradients, which the caller's mask removes."""
    fill = -math.log(vocab or logp.shape[-1])
    return torch.where(valid.bool()[..., None], logp, torch.full_like(logp, fill))


def teacher_ids(batch: RolloutBatch) -> Tensor | None:
    """The teacher's top-k token ids ``[B,T,k]`` when its distributions are top-k (``roles.teacher.top_k``)."""
    return batch.extras.get("teacher_dist_ids")


def on_common_support(student: Tensor, teachers: list[Tensor], ids: Tensor | None,
                      valid: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The student's ``[B,T,V]`` log-probs and each teacher's (``[B,T,V]``, or ``[B,T,k]`` at the token ``ids``
    ``[B,T,k]``) on one support: the vocabulary, or ``[B,T,k+1]`` (the student gathered at ``ids``, each with its
    tail bin). Every position where ``valid`` ``[B,T]`` is 0 is first set to the uniform distribution
    (``fill_invalid``)."""
    vocab = student.shape[-1]
    student = fill_invalid(student, valid)
    teachers = [fill_invalid(t, valid, vocab) for t in teachers]
    if ids is None:
        return student, teachers
    return with_tail(student.gather(-1, ids)), [with_tail(t) for t in teachers]
