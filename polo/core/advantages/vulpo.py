"""VULPO: a judged multi-part reward, mean-centred per group and scaled by label and prompt difficulty."""
from __future__ import annotations

from typing import Annotated

import torch
from pydantic import Field
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES
from polo.core.segment import group_stats_where, segment_sum

Column = Annotated[int, Field(ge=0)]


@ADVANTAGES.register("vulpo")
class VULPO(AdvantageEstimator):
    """``A = λ_y·μ_q·(r − mean_g r)``: a judged reward r, mean-centred per group (no std division, which would
    cancel the scales), scaled up for the label y the policy gets wrong more often and for the prompts q it
    rarely gets right; groups all right or all wrong get 0.

    Each rollout of a prompt labelled y (1: vulnerable, 0: safe) has a judged verdict ``v ∈ {0,1}``
    (whether its verdict is right), localisation and semantic scores ``loc, sem ∈ [0,1]`` (0, ½, 1 for
    wrong, partial, right) and a format score ``f ∈ {0,1}``:

    * reward: ``r = 0.4(2v − 1) + v(0.2·loc + 0.4·sem) − 0.2(1 − f)`` on vulnerable prompts (in [−0.6, 1]),
      ``r = −0.4(1 − v) − 0.2(1 − f)`` on safe ones (in [−0.6, 0]): only a right verdict earns the
      explanation's credit;
    * label scale: ``λ_y = 1 + α_L(1 − acc_y)``, ``acc_y`` the mean of v over the batch's rollouts of label y,
      so the label the policy currently gets wrong more often weighs more;
    * prompt scale: ``μ_q = 1 + α_S(1 − p_q)``, ``p_q`` the group's mean v, and ``μ_q = 0`` when ``p_q`` is 0
      or 1 (every rollout equally right or wrong: no signal).

    Inputs: ``judge_scores`` ``[B, D]`` (the judge role's criteria; ``criteria`` gives the columns of v, loc
    and sem; v is read as right where its score is ≥ 0.5, so a judge's probability works too; a reward
    component instead with ``verdict_reward``), ``prompt_label`` ``[B]`` (from the example column ``label``)
    and the reward component ``format_reward``.
    A row with a non-finite score it needs (a failed judge call, a format reward that returned None) is
    unscored: A = 0, it is left out of acc_y, p_q and the group mean, and out of the loss (``keep``). A lone
    rollout has p_q ∈ {0, 1}, so A = 0. acc_y comes from this batch (one data-parallel rank's share when
    there are several).
    """

    paper = "VULPO: Context-Aware Vulnerability Detection via On-Policy LLM Optimization (arXiv:2511.11896)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"judge_scores", "prompt_label"})

    criteria: tuple[Column, Column, Column] = (0, 1, 2)
    """Columns of ``judge_scores`` holding the verdict, localisation and semantic scores (the judge role's
    criteria order)."""
    verdict_reward: str | None = None
    """Reward component read as the verdict v in place of the judge's (a verifier comparing the answer's verdict
    with the label); None: the judge's ``criteria[0]`` column."""
    format_reward: str | None = "format"
    """Reward component read as the format score f; None: no format penalty (f = 1)."""
    alpha_label: float = Field(default=1.0, ge=0)
    """α_L: strength of the label-level scale λ."""
    alpha_sample: float = Field(default=1.0, ge=0)
    """α_S: strength of the prompt-level scale μ."""

    def parts(self, batch: RolloutBatch) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(v, loc, sem, f, y)`` each ``[B]`` (NaN where missing)."""
        mask = batch.mask
        scores, label = batch.input("judge_scores"), batch.input("prompt_label")
        B = batch.batch_size
        if scores is None or scores.dim() != 2 or scores.shape[0] != B:
            raise ValueError(f"vulpo: input 'judge_scores' must have shape [B, D] with B = {B}, got "
                             f"{None if scores is None else list(scores.shape)}")
        if max(self.criteria) >= scores.shape[1]:
            raise ValueError(f"vulpo: advantage.criteria {list(self.criteria)} name columns outside the judge's "
                             f"{scores.shape[1]} criteria")
        if label is None or label.shape != (B,):
            raise ValueError(f"vulpo: input 'prompt_label' must have shape [B] = [{B}], got "
                             f"{None if label is None else list(label.shape)}")
        v, loc, sem = scores.to(mask)[:, list(self.criteria)].unbind(-1)
        if self.verdict_reward is not None:
            v = batch.reward_column(self.verdict_reward).to(mask)
        f = torch.ones_like(v) if self.format_reward is None else batch.reward_column(self.format_reward).to(mask)
        return torch.where(v.isfinite(), (v >= 0.5).to(v), v), loc, sem, f, label.to(mask)

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        v, loc, sem, f, y = self.parts(batch)
        vul = y > 0.5
        explained = vul & (v > 0)  # the rows whose reward reads loc and sem
        valid = v.isfinite() & f.isfinite() & (~explained | (loc.isfinite() & sem.isfinite()))
        v, loc, sem, f = (x.nan_to_num(0.0) for x in (v, loc, sem, f))
        reward = torch.where(vul, 0.4 * (2 * v - 1) + v * (0.2 * loc + 0.4 * sem), -0.4 * (1 - v)) - 0.2 * (1 - f)

        scored = valid.to(mask)
        by_label = torch.stack([vul, ~vul]).to(mask) * scored  # [2, B]
        acc = (by_label * v).sum(-1) / by_label.sum(-1).clamp_min(1)  # acc_vul, acc_safe
        lam = torch.where(vul, 1 + self.alpha_label * (1 - acc[0]), 1 + self.alpha_label * (1 - acc[1]))
        inv = torch.unique(batch.group, return_inverse=True)[1]
        pass_rate = (segment_sum(v * scored, inv) / segment_sum(scored, inv).clamp_min(1))[inv]
        degenerate = (pass_rate == 0) | (pass_rate == 1)
        mu = torch.where(degenerate, 0.0, 1 + self.alpha_sample * (1 - pass_rate))
        mean = group_stats_where(reward, batch.group, valid)[0]
        adv = torch.where(valid, lam * mu * (reward - mean), 0.0)
        diagnostics = {"vulpo/reward_mean": float(reward[valid].mean()) if bool(valid.any()) else 0.0,
                       "vulpo/lambda_vul": float(1 + self.alpha_label * (1 - acc[0])),
                       "vulpo/lambda_safe": float(1 + self.alpha_label * (1 - acc[1])),
                       "vulpo/degenerate_frac": float(degenerate.to(mask).mean()) if len(v) else 0.0,
                       "vulpo/unscored": float((~valid).sum())}
        return AdvantageResult(adv[:, None] * mask, keep=None if bool(valid.all()) else valid,
                               diagnostics=diagnostics)
