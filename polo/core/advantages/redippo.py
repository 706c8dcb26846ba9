"""ReDiPPO: reference-guided critic baseline with discrepancy reweighting."""
from __future__ import annotations

from polo.core.advantages.base import AdvantageResult, TokenRewardAdvantage
from polo.core.advantages.gae import gae
from polo.core.batch import RolloutBatch
from polo.core.credit.critic_discrepancy import DiscrepancyWeighting
from polo.core.registry import ADVANTAGES
from polo.core.segment import masked_whiten


@ADVANTAGES.register("redippo")
class ReDiPPO(TokenRewardAdvantage, DiscrepancyWeighting):
    """Two critics on the same response positions: v_ref = ``values_privileged`` (prompt ⊕ "The ground truth
    answer is {z}."), v_std = ``values`` (prompt only).

    ``A_ref = GAE(tok_r, v_ref; γ, λ)`` (γ = λ = 1: ``A_ref = (G − v_ref)·mask``);
    ``w = discrepancy_weights(v_ref, v_std)`` (``reweight``); ``Ã = masked_whiten(w·A_ref)`` (``whiten``,
    unbiased variance). ``returns = G·mask``: both critics regress the verifier reward G at every valid token.
    Logs the spread of w over valid tokens (``redippo/weight_std``, 0 when the critics agree everywhere) and the
    share of tokens at a clamp bound (``redippo/weight_clamped_frac``).

    SECONDARY: read from a detailed third-party summary of the paper's method (its Eqs. 8–14); the whitening
    variance convention and ε_e are not reported (ours: unbiased, 1e-6).
    """

    paper = ("ReDiPPO: Reference-Guided Value Calibration and Discrepancy-Aware Token Reweighting for "
             "Mathematical Reasoning (arXiv:2607.27631)")
    provenance = "SECONDARY"
    requires = frozenset({"values", "values_privileged"})

    lam: float = 1.0
    reweight: bool = True
    whiten: bool = True

    def __call__(self, batch: RolloutBatch, kl_coef: float | None = None) -> AdvantageResult:
        mask = batch.mask
        reward = batch.scalar_reward().to(mask)
        v_ref = batch.extras["values_privileged"].to(mask)
        adv = gae(self.token_rewards(batch, reward, kl_coef), v_ref, mask, self.gamma, self.lam)
        diagnostics = {}
        if self.reweight:
            w = self.discrepancy(batch)
            adv = adv * w
            valid = w[mask.bool()]
            diagnostics = {"redippo/weight_std": float(valid.std(unbiased=False)) if valid.numel() else 0.0,
                           "redippo/weight_clamped_frac": float(((valid <= self.w_min) | (valid >= self.w_max))
                                                                .float().mean()) if valid.numel() else 0.0}
        if self.whiten:
            adv = masked_whiten(adv, mask) * mask
        return AdvantageResult(adv, returns=reward[:, None] * mask, diagnostics=diagnostics)
