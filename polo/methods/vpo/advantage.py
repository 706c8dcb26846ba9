"""VPO: a rollout's set of answers scored by its best member under random scalarizations of a vector reward."""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import Field, PrivateAttr, field_validator
from torch import Tensor

from polo.core.advantages.base import AdvantageEstimator, AdvantageResult
from polo.core.agent_primitives import group_moments
from polo.core.batch import RolloutBatch
from polo.core.registry import ADVANTAGES, ConfigError
from polo.core.segment import segment_sum

VECTOR_INPUTS = {"answers": "answer_rewards", "tests": "test_results"}
"""``vector`` setting → the input holding the reward vectors."""


def sample_gamma(alpha: float, n: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """``n`` draws of Gamma(alpha, 1), reproducible from ``generator``.

    Rejection method of "A Simple Method for Generating Gamma Variables" (Marsaglia and Tsang, 2000; no arXiv
    id): with ``d = a − 1/3``, ``c = 1/√(9d)``, ``x ~ N(0, 1)``, ``v = (1 + c·x)³``, ``u ~ U(0, 1)``, accept
    ``d·v`` when ``v > 0`` and ``ln u < x²/2 + d − d·v + d·ln v``. For ``alpha < 1`` a Gamma(alpha + 1) draw is
    multiplied by ``u^(1/alpha)``. Each round redraws only the rejected entries (under 5 % of them for a ≥ 1).
    """
    a = alpha + 1 if alpha < 1 else alpha
    d = a - 1 / 3
    c = 1 / math.sqrt(9 * d)
    out = torch.empty(n, dtype=dtype)
    todo = torch.arange(n)
    while len(todo):
        x = torch.randn(len(todo), generator=generator, dtype=dtype)
        u = torch.rand(len(todo), generator=generator, dtype=dtype)
        v = (1 + c * x) ** 3
        accept = (v > 0) & (u.log() < 0.5 * x * x + d - d * v + d * v.clamp_min(1e-300).log())
        out[todo[accept]] = d * v[accept]
        todo = todo[~accept]
    if alpha < 1:
        out = out * torch.rand(n, generator=generator, dtype=dtype) ** (1 / alpha)
    return out


def set_scores(vectors: Tensor, weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per rollout the set score ``R̂_i = mean_k max_s S_i[s]·w_k``, and ``[B, K]`` the best answer's value and its
    index per draw.

    ``vectors`` ``[B, M, D]``: the reward vectors of up to M answers (an all-NaN row is a missing answer, a NaN
    component of a present answer counts 0); ``weights`` ``[B, K, D]``: the draws of each rollout's group. A
    rollout with no answer gets ``R̂ = 0`` and ``−inf`` as its best per draw. Ties go to the lowest index.
    """
    present = ~vectors.isnan().all(-1)  # [B, M]
    value = torch.einsum("bmd,bkd->bmk", vectors.nan_to_num(0.0), weights)
    value = value.masked_fill(~present[..., None], -math.inf)
    best, choice = value.amax(1), value.argmax(1)  # [B, K]
    return torch.where(present.any(1), best.mean(-1), 0.0), best, choice


@ADVANTAGES.register("vpo")
class VPO(AdvantageEstimator):
    """Vector rewards scored as answer sets: ``S_i`` ``[m_i, D]`` holds the reward vectors of the ``m_i`` answers
    rollout i gave in one generation. Each group draws K weights ``w_k ~ Dirichlet(α·1)`` on the simplex of the
    group's reward dimensions (shared by its rollouts), scores each set by its best member per draw,
    ``R̂_i = (1/K) Σ_k max_s S_i[s]·w_k`` (``R̂_i = 0`` when no answer was parsed), and z-scores the set scores in
    the group with the population std: ``A_i = (R̂_i − μ_g)/(σ_g + eps)``, ``A_i = 0`` when ``σ_g < eps``;
    ``A`` is broadcast over the response tokens.

    A set whose members cover different trade-offs beats a set of copies of one good answer, so the policy
    learns to spread its answers over the Pareto front. With one answer (``answers: 1``, or ``vector: tests``)
    ``R̂_i`` is the mean linear scalarization ``w̄·S_i[0]``.

    Inputs (``vector``): ``answers`` reads ``answer_rewards`` ``[B, M, D]`` (the provider splits each completion
    into up to ``answers`` answers on ``separator`` and scores every answer with every reward component of the
    run, so D = number of reward components; NaN rows for missing answers); ``tests`` reads ``test_results``
    ``[B, U]`` as one answer whose D = U components are the per-test results (NaN: no such test; a group's
    weights live on the tests its rollouts ran). VPO needs a reward that is a vector: on a task with one reward
    component every draw is the same and VPO reduces to a z-score of each answer set's best reward.
    Diagnostics: ``vpo/group_std`` (mean σ_g over rows), ``vpo/set_score`` (mean R̂), ``vpo/pool_best`` (mean over
    groups of ``mean_k max_{i,s} S_i[s]·w_k``, the best the whole group reaches) and
    ``vpo/scalarization_disagreement``, the share of (rollout, draw) pairs whose best answer is another than under
    the rollout's first draw: 0 when every set has one answer, or answers of which one is best on every component
    (then the max over the set is a fixed answer and VPO is a linear scalarization), > 0 when the sets hold
    answers that trade the components off.
    """

    paper = "Vector Policy Optimization: Training for Diversity Improves Test-Time Search (arXiv:2605.22817)"
    provenance = "CODE"

    vector: Literal["answers", "tests"] = "answers"
    """Where the reward vectors come from: ``answers`` (the ``answer_rewards`` input) or ``tests`` (``test_results``,
    one answer per rollout with the per-test results as its vector)."""
    answers: int = Field(3, gt=0)
    """m: answers per rollout that the ``answer_rewards`` provider parses (the rest of a completion is ignored)."""
    separator: str = Field("\n", min_length=1)
    """Text between two answers of a completion (after the task's answer marker, when it has one)."""
    draws: int = Field(100, gt=0)
    """K: Dirichlet weight draws per group."""
    alpha: float = Field(1.0, gt=0)
    """Dirichlet concentration (1: uniform on the simplex)."""
    eps: float = Field(1e-6, gt=0)
    """Added to σ_g; groups with σ_g < eps get A = 0."""
    weights: list[list[float]] | None = None
    """Fixed K × D weights used for every group instead of the draws (rows are renormalized onto the group's
    reward dimensions); None: draw them."""
    seed: int = 0
    """Seed of the weight draws (the generator's state is checkpointed with the run)."""

    _generator: torch.Generator = PrivateAttr(default=None)

    @field_validator("weights")
    @classmethod
    def _simplex_rows(cls, rows: list[list[float]] | None) -> list[list[float]] | None:
        if rows is not None:
            if not rows or len({len(r) for r in rows}) != 1 or not rows[0]:
                raise ValueError(f"expected K rows of D numbers each, got {rows!r}")
            if any(w < 0 for r in rows for w in r) or any(sum(r) <= 0 for r in rows):
                raise ValueError(f"rows must be non-negative with a positive sum, got {rows!r}")
        return rows

    def model_post_init(self, context: Any) -> None:
        self._generator = torch.Generator().manual_seed(self.seed)

    def needs(self) -> set[str]:
        return {VECTOR_INPUTS[self.vector]}

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._generator.set_state(state["generator"])

    def vectors(self, batch: RolloutBatch) -> Tensor:
        """``[B, M, D]`` reward vectors of each rollout's answers (NaN rows: missing answers)."""
        name = VECTOR_INPUTS[self.vector]
        x = batch.input(name)
        if x is None:
            raise ValueError(f"advantage vpo (vector: {self.vector}) needs the input {name!r}, absent from the batch")
        expected = 3 if self.vector == "answers" else 2
        if x.dim() != expected or x.shape[0] != batch.batch_size:
            raise ValueError(f"advantage vpo: {name} must have {expected} dims with B={batch.batch_size} rows, "
                             f"got shape {tuple(x.shape)}")
        return x if self.vector == "answers" else x[:, None, :]

    def group_weights(self, seen: Tensor, dtype: torch.dtype) -> Tensor:
        """``[G, K, D]`` weights per group on the simplex of its seen dimensions (``seen`` ``[G, D]`` bool)."""
        n, D = seen.shape
        if self.weights is None:
            raw = sample_gamma(self.alpha, n * self.draws * D, self._generator).to(dtype).view(n, self.draws, D)
        else:
            raw = torch.tensor(self.weights, dtype=dtype).expand(n, -1, -1)
            if raw.shape[-1] != D:
                raise ConfigError(f"advantage.weights: rows have {raw.shape[-1]} entries, the reward vectors {D}")
        raw = raw.to(seen.device) * seen[:, None, :]
        return raw / raw.sum(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        vectors = self.vectors(batch).to(mask.dtype)
        _, inv = torch.unique(batch.group, return_inverse=True)
        n = int(inv.max()) + 1 if inv.numel() else 0
        seen = segment_sum((~vectors.isnan()).any(1).to(mask.dtype), inv, n) > 0  # [G, D]
        score, best, choice = set_scores(vectors, self.group_weights(seen, mask.dtype)[inv])
        mean, std, count = group_moments(score, batch.group, std_kind="population", singleton="self_mean")
        std = torch.where(count > 1, std, 0.0)
        adv = torch.where(std >= self.eps, (score - mean) / (std + self.eps), 0.0)
        pool = best.new_full((n, best.shape[1]), -math.inf).scatter_reduce(0, inv[:, None].expand_as(best), best,
                                                                            "amax")
        reached = pool.isfinite().all(-1)
        diagnostics = {"vpo/group_std": float(std.mean()) if len(std) else 0.0,
                       "vpo/set_score": float(score.mean()) if len(score) else 0.0,
                       "vpo/pool_best": float(pool[reached].mean(-1).mean()) if reached.any() else 0.0,
                       "vpo/scalarization_disagreement": float((choice != choice[:, :1]).to(mask.dtype).mean())
                       if choice.numel() else 0.0}
        return AdvantageResult(adv[:, None] * mask, diagnostics=diagnostics)
