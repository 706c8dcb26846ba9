"""SRPO's SDPO branch: failed rollouts distilled toward a self-teacher that has seen a correct sibling."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.methods.srpo.advantage import SRPO_PAPER
from polo.core.batch import RolloutBatch
from polo.core.distill import generalized_jsd, on_common_support, teacher_ids
from polo.core.losses.base import LossOutput
from polo.core.registry import REGULARIZERS
from polo.core.regularizers.base import Regularizer
from polo.core.segment import masked_mean


@REGULARIZERS.register("self_distill")
class SelfDistill(Regularizer):
    """On the tokens of routed rows ``z_i = (1 − c_i)·sibling_present_i`` (failed, with a correct sibling in the
    group): ``u = w·JSD_β(q ‖ p)·min(ρ, is_clip)``, where ``q`` is the teacher re-prompted with a correct
    sibling's response (``teacher_dist_sibling``), ``p`` the student, ``JSD_β`` as in
    ``polo.core.distill.generalized_jsd`` (β the teacher's weight: SDPO's α), ``ρ = exp(logp − old_logp)``
    detached (``is_clip`` None: no correction) and ``w = exp(−s·H(q)) / mean_{routed tokens of the batch}
    exp(−s·H(q))`` (``sibling_entropy_weight``, computed by the provider over the whole batch, stop-gradient;
    s = ``entropy_sharpness``): confident teacher positions count more. ``u = 0`` on every other token.

    The scope is every valid token, so with the ``srpo`` advantage (0 on routed rows) and ``token_mean``
    aggregation the two branches share SRPO's one denominator:
    ``L = (Σ_{z=0} mask·ℓ^PG + Σ_{z=1} mask·w·ℓ^SD) / Σ mask``.
    """

    paper = SRPO_PAPER
    provenance = "SECONDARY"
    requires = frozenset({"teacher_dist_sibling", "sibling_present", "sibling_entropy_weight", "correct"})
    full_distribution = True

    beta: float = Field(0.5, ge=0, le=1)
    """Teacher weight of the generalized JSD (SDPO's α: 0 forward KL(teacher‖student), 1 reverse)."""
    entropy_sharpness: float = Field(1.0, ge=0)
    """s in the token weight ``exp(−s·H(teacher))`` (read by the ``sibling_entropy_weight`` provider)."""
    is_clip: float | None = Field(2.0, gt=0)
    """Cap of the importance correction ``min(exp(logp − old_logp), is_clip)``; None: no correction."""

    def needs(self) -> set[str]:
        return set(self.requires) | ({"old_logp"} if self.is_clip is not None else set())

    def __call__(self, logp: Tensor, batch: RolloutBatch, logprobs: Tensor | None = None) -> LossOutput:
        routed = batch.input("sibling_present").bool() & ~batch.input("correct").bool()
        valid = routed[:, None] & batch.response_mask.bool()
        student, (teacher,) = on_common_support(logprobs, [batch.input("teacher_dist_sibling")], teacher_ids(batch),
                                                valid)
        jsd = generalized_jsd(student, teacher, self.beta)
        u = jsd * batch.input("sibling_entropy_weight").to(jsd)
        if self.is_clip is not None:
            u = u * (logp.detach() - batch.old_logp).clamp(max=20).exp().clamp(max=self.is_clip)
        u = torch.where(valid, u, 0.0)
        valid = valid.to(u)
        return LossOutput(u, {"jsd": masked_mean(jsd.detach(), valid),
                              "routed_token_frac": masked_mean(valid, batch.mask.to(u))})
