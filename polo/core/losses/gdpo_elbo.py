"""GDPO for diffusion LMs: a clipped sequence-level surrogate whose ratio is the exponentiated ELBO difference."""
from __future__ import annotations

from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.losses.base import LossOutput, PolicyLoss, clipped_surrogate, ratio
from polo.core.registry import POLICY_LOSSES
from polo.core.segment import masked_mean


@POLICY_LOSSES.register("gdpo_elbo")
class GDPOElbo(PolicyLoss):
    """GDPO ("Improving Reasoning for Diffusion Language Models via Group Diffusion Policy Optimization",
    arXiv:2510.08554): a masked diffusion LM has no tractable
    ``log π(y|q)``, so its sequence ELBO Ê(y) stands in for it. ``logp``, ``old_logp`` (and ``ref_logp``) are
    per-position ELBO contributions computed with the same masks (a diffusion policy's ``forward_logp``), so

        r_i = exp(Ê_θ(y_i) − Ê_old(y_i)),   Ê(y_i) = Σ_t m·logp,
        ℓ_i = max(−A_i·r_i, −A_i·clip(r_i, 1−ε_low, 1+ε_high)) / |y_i| + β·kl_i,
        kl_i = exp(Ê_ref − Ê_θ) − (Ê_ref − Ê_θ) − 1,

    with A_i the row's sequence advantage (the paper's ``R − mean_group R``: the ``dr_grpo`` advantage) and ``|y_i|``
    its length. Every valid token carries ℓ_i, so ``seq_mean_token_mean`` gives the paper's
    ``(1/G) Σ_i (1/|y_i|) min(r·A, clip(r)·A) − β·KL``. One clipping decision per response.
    """

    paper = ("Improving Reasoning for Diffusion Language Models via Group Diffusion Policy Optimization "
             "(arXiv:2510.08554)")
    provenance = "CODE"

    clip_low: float = Field(default=0.2, ge=0)
    clip_high: float = Field(default=0.2, ge=0)
    beta: float = Field(default=0.0, ge=0)
    """Weight of the sequence k3 KL of the ELBOs to the reference; > 0 needs ``ref_logp``."""

    @property
    def inert_at_zero_advantage(self) -> bool:  # a row with A = 0 still has a KL gradient when β > 0
        return self.beta == 0

    def needs(self) -> set[str]:
        return set(self.requires) | ({"ref_logp"} if self.beta > 0 else set())

    def __call__(self, logp: Tensor, batch: RolloutBatch) -> LossOutput:
        mask = batch.mask
        length = mask.sum(-1)
        rows = (length > 0).to(mask)
        elbo = (logp * mask).sum(-1)
        r = ratio(elbo, (batch.old_logp * mask).sum(-1))
        adv = masked_mean(batch.advantages, mask, dim=-1)
        u, metrics = clipped_surrogate(r, adv, rows, self.clip_low, self.clip_high)
        u = u / length.clamp_min(1)
        metrics["elbo_mean"] = masked_mean(elbo.detach(), rows)
        if self.beta > 0:
            d = (batch.ref_logp * mask).sum(-1) - elbo
            kl = d.clamp(max=20).exp() - d - 1
            u = u + self.beta * kl
            metrics["kl_elbo"] = masked_mean(kl.detach(), rows)
        return LossOutput(u[:, None] * mask, metrics)
