"""VERPO's evidence channel: the shift that a correct sibling causes in the teacher's next-token distribution,
accepted token by token with a stop-gradient weight that trades the local policy-gradient benefit against the
Fisher cost of the move."""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.distill import on_common_support, teacher_ids
from polo.core.losses.base import LossOutput
from polo.core.registry import REGULARIZERS
from polo.core.regularizers.base import Regularizer
from polo.core.segment import masked_mean

VERPO_PAPER = "VERPO: Verified Evidence Regularized Policy Optimization (arXiv:2609.06100)"


def fisher_inner(p: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``aᵀ F b`` with the softmax Fisher ``F = diag(p) − p pᵀ``, as ``E_p[ab] − E_p[a]·E_p[b]`` (last dim)."""
    return (p * a * b).sum(-1) - (p * a).sum(-1) * (p * b).sum(-1)


def evidence_direction(direction: str, p: Tensor, q0: Tensor, pos: Tensor, neg: Tensor | None,
                       eps: float) -> Tensor:
    """The displacement ``s`` (probabilities over the last dim; each sums to 0): ``fixed`` ``q+ − q0``; ``ctr``
    ``q+ − q−``; ``fec`` ``Δtask − α_F·Δnuis`` with ``Δtask = q+ − q−``, ``Δnuis = (q+ + q−)/2 − q0`` (the shift
    any evidence causes) and ``α_F = Δtaskᵀ F Δnuis / (Δnuisᵀ F Δnuis + eps)``: the Fisher projection of the
    shared shift out of the contrast."""
    if direction == "fixed":
        return pos - q0
    task = pos - neg
    if direction == "ctr":
        return task
    nuisance = (pos + neg) / 2 - q0
    alpha = fisher_inner(p, task, nuisance) / (fisher_inner(p, nuisance, nuisance) + eps)
    return task - alpha[..., None] * nuisance


def evidence_weight(p: Tensor, s: Tensor, sampled: Tensor, advantage: Tensor, cost_alpha: float,
                    cost_epsilon: float) -> Tensor:
    """``w = h / (h + a_c·c + ε_c)`` ∈ [0, 1): benefit ``h = max(Â·ζ, 0)`` with ``ζ = s(y_t) − E_p s`` (``sampled``:
    the index of y_t on the support), cost ``c = Var_p(s) = sᵀ F s``."""
    zeta = s.gather(-1, sampled[..., None]).squeeze(-1) - (p * s).sum(-1)
    benefit = (advantage * zeta).clamp_min(0)
    return benefit / (benefit + cost_alpha * fisher_inner(p, s, s) + cost_epsilon)


def support_index(response_ids: Tensor, ids: Tensor | None) -> Tensor:
    """``[B,T]`` each sampled token's index on the support: its id on the vocabulary, or its place among the
    top-k ``ids`` (k, the tail bin, when it is not among them)."""
    if ids is None:
        return response_ids
    hit = ids == response_ids[..., None]
    return torch.where(hit.any(-1), hit.long().argmax(-1), ids.shape[-1])


@REGULARIZERS.register("verpo_evidence")
class VerpoEvidence(Regularizer):
    """``L_evi = −(1/Z_e) Σ m_evi·w·Σ_v s(v)·log p(v)``: its gradient in the student's logits is exactly ``−w·s``
    (s sums to 0), a move of p along the evidence direction ``s`` (``evidence_direction`` of the teacher without
    evidence ``q0`` = ``teacher_dist``, with a correct sibling ``q+`` = ``teacher_dist_sibling`` and with an
    incorrect one ``q−`` = ``teacher_dist_negative``), with the stop-gradient weight ``w`` of ``evidence_weight``
    (large where the shift agrees with the token's advantage, small where it moves the policy far). The scope
    ``m_evi·mask`` holds the rows with evidence: a correct sibling other than the row (and for ``ctr``/``fec``
    also an incorrect one). The companion reference channel ``KL(q0‖p)`` is ``distill`` with ``beta: 0``.
    Forward-KL family only (the reverse-KL arm of the paper's code is not implemented). The citation gives the
    method's name and arXiv id; the exact title was not verified.
    """

    paper = VERPO_PAPER
    provenance = "CODE"
    requires = frozenset({"teacher_dist", "teacher_dist_sibling", "sibling_present"})
    full_distribution = True

    direction: Literal["fixed", "ctr", "fec"] = "fec"
    """``fixed`` q+ − q0, ``ctr`` q+ − q−, ``fec`` the contrast with the shared evidence shift projected out."""
    cost_alpha: float = Field(0.0025, ge=0)
    """a_c: weight of the Fisher cost in ``w = h/(h + a_c·c + ε_c)``."""
    cost_epsilon: float = Field(2.5e-5, gt=0)
    """ε_c in the weight's denominator."""
    projection_epsilon: float = Field(1e-8, ge=0)
    """ε_fec added to ``Δnuisᵀ F Δnuis`` in the FEC projection."""

    def needs(self) -> set[str]:
        negative = {"teacher_dist_negative", "negative_present"}
        return set(self.requires) | (set() if self.direction == "fixed" else negative)

    def scope(self, batch: RolloutBatch) -> Tensor:
        present = batch.input("sibling_present").bool()
        if self.direction != "fixed":
            present = present & batch.input("negative_present").bool()
        return batch.mask * present.to(batch.mask)[:, None]

    def __call__(self, logp: Tensor, batch: RolloutBatch, logprobs: Tensor | None = None) -> LossOutput:
        valid = self.scope(batch) > 0
        names = ["teacher_dist", "teacher_dist_sibling"] + ([] if self.direction == "fixed" else
                                                             ["teacher_dist_negative"])
        ids = teacher_ids(batch)
        student, teachers = on_common_support(logprobs, [batch.input(n) for n in names], ids, valid)
        q0, pos, *neg = (t.exp() for t in teachers)
        p = student.detach().exp()
        s = evidence_direction(self.direction, p, q0, pos, neg[0] if neg else None, self.projection_epsilon)
        w = evidence_weight(p, s, support_index(batch.response_ids, ids), batch.advantages.to(p),
                            self.cost_alpha, self.cost_epsilon)
        w = torch.where(valid, w, 0.0)
        u = -w * (s * student).sum(-1)
        valid = valid.to(u)
        return LossOutput(u, {"weight": masked_mean(w, valid), "accepted_frac": masked_mean((w > 0).to(u), valid),
                              "evidence_token_frac": masked_mean(valid, batch.mask.to(u))})
