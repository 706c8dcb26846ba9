"""On-policy distillation toward a teacher (GKD), optionally gated by the rollout's reward (KEPO)."""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.distill import generalized_jsd, on_common_support, teacher_ids
from polo.core.losses.base import LossOutput
from polo.core.registry import REGULARIZERS
from polo.core.regularizers.base import Regularizer
from polo.core.segment import masked_mean

GKD_PAPER = "On-Policy Distillation of Language Models: Learning from Self-Generated Mistakes (arXiv:2306.13649)"
KEPO_PAPER = "Knowledge-Enhanced Policy Optimization (arXiv:2602.00400)"


@REGULARIZERS.register("distill")
class Distill(Regularizer):
    """``u[b,t] = JSD_β(q[b,t] ‖ p[b,t])`` between the teacher's next-token distribution ``q`` (``teacher_dist``,
    the teacher reading the student's own response) and the student's ``p``, on the teacher's support (the
    vocabulary, or its top-k ids and a tail bin); ``JSD_β`` as in ``polo.core.distill.generalized_jsd`` (β: the
    teacher's weight, 0 forward KL(q‖p), 1 reverse KL(p‖q)). Averaged over its scope: every valid token
    (``gate: all``, GKD on the student's samples) or the tokens of rows whose scalar reward is at least ``tau``
    (``gate: reward``, KEPO's quality gate ``g_i = 1[r_i ≥ τ]``, scope ``g·mask``: distilling on badly started
    responses teaches from noisy targets). With ``beta: 0`` it is VERPO's reference channel ``KL(q0 ‖ p)``.
    """

    paper = f"{GKD_PAPER}; {KEPO_PAPER}"
    provenance = "CODE"
    requires = frozenset({"teacher_dist"})
    full_distribution = True

    beta: float = Field(0.5, ge=0, le=1)
    """Teacher weight β of the generalized JSD: 0 forward KL(teacher‖student), 1 reverse KL(student‖teacher)
    (TRL's GKD default 0.5)."""
    gate: Literal["all", "reward"] = "all"
    """``all``: every valid token; ``reward``: only rows with scalar reward ≥ ``tau`` (KEPO)."""
    tau: float = 1.0
    """Reward threshold of ``gate: reward``."""

    def scope(self, batch: RolloutBatch) -> Tensor:
        if self.gate == "all":
            return batch.mask
        return batch.mask * (batch.scalar_reward() >= self.tau).to(batch.mask)[:, None]

    def __call__(self, logp: Tensor, batch: RolloutBatch, logprobs: Tensor | None = None) -> LossOutput:
        valid = self.scope(batch) > 0
        student, (teacher,) = on_common_support(logprobs, [batch.input("teacher_dist")], teacher_ids(batch), valid)
        u = torch.where(valid, generalized_jsd(student, teacher, self.beta), 0.0)
        metrics = {"jsd": masked_mean(u.detach(), valid.to(u))}
        if self.gate == "reward":
            metrics["gated_frac"] = masked_mean(valid.to(u), batch.mask.to(u))
        return LossOutput(u, metrics)
