"""LambdaMix's advantage: each objective z-scored in its group, weighted by the row's own preference vector."""
from __future__ import annotations

from typing import Literal

import torch

from polo.core.advantages.base import AdvantageResult
from polo.core.advantages.gdpo import GDPO, whiten_rows
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES


@ADVANTAGES.register("lambdamix")
class LambdaMixAdvantage(GDPO):
    """``A_i = Σ_m λ[i,m]·Ẑ[i,m]``: the K = M reward columns are the M objectives, ``Ẑ[:,m]`` is objective m's
    z-score in each group (unbiased std, ``eps``; GDPO's decoupled normalisation, a reward absent from a row
    counts 0 there), and ``λ[i]`` ``[B, M]`` is the preference vector the row was generated under (the engine
    draws one per prompt and writes it as the batch input ``lam``). Unlike GDPO the weights differ per row, so
    a group's advantages rank its rollouts by the trade-off that group was asked for (logged: the spread of λ
    over rows, ``lambdamix/lambda_std``, and the share of rows whose advantage sign differs from the equal-weight
    mix ``mean_m Ẑ[i,m]``, ``lambdamix/sign_vs_equal``); ``whiten`` (default
    ``none``: the paper's plain weighted sum) optionally whitens the result over the batch as GDPO does.

    LambdaMix, reconstructed from its abstract (2026, no arXiv id found): one LoRA adapter per objective on a
    frozen base, mixed with weights λ both in the generating policy and in this advantage, so one run learns the
    whole trade-off and λ is chosen at inference time.
    """

    paper = ("LambdaMix: steerable multi-objective GRPO with one LoRA per objective (2026, arXiv id not found; "
             "reconstructed from its abstract)")
    provenance = "RECONSTRUCTED"
    requires = frozenset({"lam", "reward_present"})

    whiten: Literal["token", "sample", "none"] = "none"
    """Batch whitening of the weighted sum (GDPO's options); ``none``: ``A_i`` as is."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        comp = self.components(batch)
        lam = batch.extras["lam"].to(comp)
        if lam.shape != comp.shape:
            raise ValueError(f"advantage lambdamix: the preference vectors lam have shape {tuple(lam.shape)}, but the "
                             f"batch has {tuple(comp.shape)} (rows, reward columns): one reward per objective, in the "
                             f"adapters' order")
        if not bool(torch.isfinite(lam).all()):
            raise ValueError("advantage lambdamix: the preference vectors lam hold NaN or inf")
        keep = torch.ones(len(comp), dtype=torch.bool, device=comp.device)
        mixed, equal = (comp * lam).sum(-1), comp.mean(-1)
        decided = equal.abs() > 1e-6
        flips = (torch.sign(mixed) != torch.sign(equal)) & decided
        return AdvantageResult(whiten_rows(mixed, batch.mask, keep, self.whiten), diagnostics={
            "lambdamix/lambda_std": float(lam.std(0, unbiased=False).mean()),
            "lambdamix/sign_vs_equal": float(flips.sum() / decided.sum().clamp_min(1))})
