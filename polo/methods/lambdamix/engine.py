"""The ``lambda_mix`` engine: ``single_turn`` under a preference vector λ drawn per prompt (LambdaMix)."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.registry import ConfigError
from polo.engines.base import ENGINES
from polo.engines.single_turn import SingleTurn
from polo.tasks.base import Example


def draw_preferences(n: int, objectives: int, corner_prob: float, generator: torch.Generator) -> Tensor:
    """``[n, M]`` preference vectors: ``λ ~ Dirichlet(1_M)`` (normalised Exp(1) draws ``−log u``), each replaced
    with probability ``corner_prob`` by a uniformly chosen one-hot corner ``e_m``. Every draw comes from
    ``generator`` (the same number per call), so a resumed run draws the same λ."""
    u = torch.rand(n, objectives, generator=generator)
    weights = -torch.log1p(-u)  # Exp(1); 1 − u > 0
    lam = weights / weights.sum(-1, keepdim=True)
    corner = torch.rand(n, generator=generator) < corner_prob
    which = torch.randint(objectives, (n,), generator=generator)
    one_hot = torch.nn.functional.one_hot(which, objectives).to(lam)
    return torch.where(corner[:, None], one_hot, lam)


@ENGINES.register("lambda_mix")
class LambdaMixEngine(SingleTurn):
    """``single_turn`` for a policy wrapped by the ``lambda_mix`` role: each prompt draws a preference vector
    (``draw_preferences``), shared by its G rollouts, that mixes the policy's adapters while they are sampled;
    it is the batch input ``lam`` ``[B, M]``, read by the ``lambdamix`` advantage and handed back to every
    training forward. LambdaMix: steerable multi-objective GRPO with one LoRA per objective (reconstructed)."""

    paper = ("LambdaMix: steerable multi-objective GRPO with one LoRA per objective (2026, arXiv id not found; "
             "reconstructed from its abstract)")
    provenance = "RECONSTRUCTED"
    provides = SingleTurn.provides | {"lam"}

    corner_prob: float = Field(0.2, ge=0, le=1)
    """Probability that a prompt's λ is a one-hot corner (a single objective) instead of a Dirichlet draw."""

    def row_inputs(self, policy, asks: list[Example], G: int, generator: torch.Generator) -> dict[str, Tensor]:
        objectives = getattr(policy, "objectives", None)
        if objectives is None:
            raise ConfigError("engine lambda_mix samples under preference vectors that mix the adapters of the "
                              "lambda_mix role: add roles: {lambda_mix: {objectives: M}}")
        lam = draw_preferences(len(asks), objectives, self.corner_prob, generator)
        return {**super().row_inputs(policy, asks, G, generator), "lam": lam.repeat_interleave(G, 0)}
