"""Generalized Advantage Estimation with a critic."""
from __future__ import annotations

import torch
from torch import Tensor

from polo.core.advantages.base import AdvantageResult, TokenRewardAdvantage
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import masked_whiten


def gae(
    tok_r: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float, exponent: Tensor | None = None,
    dones: Tensor | None = None, bootstrap: Tensor | None = None,
) -> Tensor:
    """Backward over t: ``δ_t = r_t + γ^ρ_t·(1−d_t)·V_next − V_t``, ``A_t = δ_t + (γλ)^ρ_t·(1−d_t)·A_next``;
    at the end V_next = ``bootstrap`` ``[B]`` (default 0) and A_next = 0. ``exponent`` ρ ``[B,T]``: per-token
    discount exponent (InfoPPO's information time); None: ρ = 1. ``dones`` d ``[B,T]``: 1 where an episode ended
    after step t (an environment row holds several episodes back to back); None: no boundary inside a row.

    Masked positions are skipped: V_next and A_next are carried over them, so a tool/observation
    token inside a row does not break the recursion. Returns A ``[B,T]``, zero where ``mask == 0``.
    """
    rho = torch.ones_like(tok_r) if exponent is None else exponent.to(tok_r)
    going = torch.ones_like(tok_r) if dones is None else 1.0 - dones.to(tok_r)
    # time-major contiguous copies: the loop reads one time step of every row at a time
    r, v, valid = (x.t().contiguous() for x in (tok_r, values.to(tok_r), mask.bool()))
    discount, trace = ((gamma**rho) * going).t().contiguous(), (((gamma * lam) ** rho) * going).t().contiguous()
    next_a = tok_r.new_zeros(tok_r.shape[0])
    next_v = next_a if bootstrap is None else bootstrap.to(tok_r)
    out = torch.empty_like(r)
    for t in reversed(range(r.shape[0])):
        a = r[t] + discount[t] * next_v - v[t] + trace[t] * next_a
        next_a = torch.where(valid[t], a, next_a)
        next_v = torch.where(valid[t], v[t], next_v)
        out[t] = next_a
    return out.t() * mask


@ADVANTAGES.register("gae")
class GAE(TokenRewardAdvantage):
    """PPO advantages: GAE on token rewards (R_i on the last valid token, optional KL-in-reward
    ``−kl_coef·kl(old_logp, ref_logp)``); ``returns = A + values`` (unwhitened);
    ``adv = masked_whiten(A, mask)`` over the batch when ``whiten``.

    Environment rows (a control policy's steps, ``polo.control.engines.gym``) carry three optional extras, which
    only that engine provides: their own per-step rewards ``step_rewards``, episode ends ``dones`` and the value of
    the state after the row's last step ``bootstrap_value``; the recursion then runs over them unchanged.

    GAE(γ, λ) is the exponentially weighted average of the k-step advantage estimates: λ = 1 gives the
    Monte-Carlo return minus V (unbiased, high variance), λ = 0 the one-step TD error.
    """

    paper = "High-Dimensional Continuous Control Using Generalized Advantage Estimation (arXiv:1506.02438)"
    provenance = "CODE"
    requires = frozenset({"values"})

    lam: float = 1.0
    whiten: bool = True

    def discount_exponent(self, batch: RolloutBatch) -> Tensor | None:
        """Per-token discount exponent ρ ``[B,T]`` for ``gae`` (None: token time)."""
        return None

    def __call__(self, batch: RolloutBatch, kl_coef: float | None = None) -> AdvantageResult:
        mask = batch.mask
        steps = batch.extras.get("step_rewards")
        tok_r = self.token_rewards(batch, batch.scalar_reward().to(mask), kl_coef) if steps is None else steps * mask
        adv = gae(tok_r, batch.values, mask, self.gamma, self.lam, self.discount_exponent(batch),
                  batch.extras.get("dones"), batch.extras.get("bootstrap_value"))
        returns = (adv + batch.values) * mask
        if self.whiten:
            adv = masked_whiten(adv, mask) * mask
        return AdvantageResult(adv, returns)
