"""RAPO's rewards for score prediction: an absolute (Gaussian kernel) and a relative (batch ranking) reward.

Paper: "Aes-R1" / Relative-Absolute Policy Optimization (arXiv:2509.21871). The batch holds N items (groups),
each with K sampled predictions ``o`` of the item's true score ``s``. The inputs are ``predicted_score`` ``[B]``
(NaN where a completion states no parseable score) and ``true_score`` ``[B]``, written by the providers of
polo/methods/rapo/inputs.py.
"""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.segment import segment_sum
from polo.core.shaping.base import RewardShaping

PAPER = "Relative-Absolute Policy Optimization, in Aes-R1 (arXiv:2509.21871)"
ABS_FLOOR = 1e-5
"""Added to the Gaussian kernel of the absolute reward (as in the authors' code)."""
RANK_EPS = 1e-6
"""Added under the square roots and to the variance sum of the relative reward (as in the authors' code)."""


def absolute_reward(o: Tensor, s: Tensor, sigma: float) -> Tensor:
    """``r_abs = exp(−½(|o − s|/σ)²) + 1e-5``, and 0 where ``o`` is NaN (no parseable prediction). ``[B]``."""
    valid = o.isfinite()
    kernel = torch.exp(-0.5 * ((o - s) / sigma) ** 2) + ABS_FLOOR
    return torch.where(valid, kernel, torch.zeros_like(kernel))


def rank_reward(o: Tensor, s: Tensor, group: Tensor) -> Tensor:
    """RAPO's relative reward of each prediction against every other item of the batch. ``[B]``.

    With item ``j``'s mean prediction ``μ_j`` and unbiased variance ``v_j`` (over its parseable predictions;
    0 with a single one), the Thurstone probability that prediction ``o_b`` of item ``i`` ranks above item
    ``j`` is ``p = Φ((o_b − μ_j)/sqrt(v_i + v_j + 1e-6))``; the label is ``y = 1[s_i ≥ s_j]`` and the score
    of the pair is the fidelity ``sqrt(p·y + 1e-6) + sqrt((1 − p)(1 − y) + 1e-6)``. The reward is the mean
    fidelity over the other items ``j ≠ i`` (``1/(N−1) Σ_{j≠i}``). Items with no parseable prediction are no
    comparator; a row with no parseable prediction, or with no comparator (a batch of one item), gets 0.
    Computed as one ``[B, N]`` table (rows × items), so groups of unequal size are fine.
    """
    if not bool(s.isfinite().all()):
        raise ValueError("rapo: true_score must be finite on every row")
    _, item = torch.unique(group, return_inverse=True)
    valid = o.isfinite()
    x = torch.where(valid, o, torch.zeros_like(o))
    w = valid.to(o.dtype)
    n = segment_sum(w, item)
    mean = segment_sum(x, item) / n.clamp_min(1)
    dev = torch.where(valid, x - mean[item], torch.zeros_like(x))
    var = segment_sum(dev**2, item) / (n - 1).clamp_min(1)
    truth = segment_sum(s, item) / segment_sum(torch.ones_like(s), item)
    p = torch.special.ndtr((x[:, None] - mean[None]) / torch.sqrt(var[item][:, None] + var[None] + RANK_EPS))
    y = (s[:, None] >= truth[None]).to(o.dtype)
    fidelity = torch.sqrt(p * y + RANK_EPS) + torch.sqrt((1 - p) * (1 - y) + RANK_EPS)
    others = (item[:, None] != torch.arange(len(n), device=o.device)[None]) & (n > 0)[None] & valid[:, None]
    count = others.sum(1)
    total = (fidelity * others).sum(1)
    return torch.where(count > 0, total / count.clamp_min(1), torch.zeros_like(total))


def _inputs(batch: RolloutBatch, term: str) -> tuple[Tensor, Tensor]:
    got = []
    for name in ("predicted_score", "true_score"):
        x = batch.input(name)
        if x is None or x.shape != (batch.batch_size,):
            raise ValueError(f"shaping {term}: input {name!r} must have shape [B] = [{batch.batch_size}], got "
                             f"{None if x is None else list(x.shape)}")
        got.append(x)
    return got[0], got[1]


@SHAPING.register("rapo_abs")
class RapoAbsolute(RewardShaping):
    """RAPO's absolute reward ``r_abs = exp(−½(|o − s|/σ_a)²) + 1e-5`` (0 for an unparseable prediction): a
    Gaussian kernel of the distance between the predicted score ``o`` and the true score ``s``."""

    paper = PAPER
    provenance = "CODE"
    requires = frozenset({"predicted_score", "true_score"})
    max_value = 1.0 + ABS_FLOOR

    sigma: float = Field(0.1, gt=0.0)
    """σ_a, the kernel's width in score units (scores in [0, 1])."""

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        o, s = _inputs(batch, "rapo_abs")
        return absolute_reward(o, s, self.sigma)

    def present(self, batch: RolloutBatch) -> Tensor:
        """The rows with a parseable prediction."""
        return batch.input("predicted_score").isfinite()


@SHAPING.register("rapo_rank")
class RapoRank(RewardShaping):
    """RAPO's relative reward: how well each prediction ranks its item against every other item of the batch
    (``rank_reward``: Thurstone probabilities from the items' prediction means and variances, scored by their
    fidelity to the true order; in [0, 1 + 2e-3], ≈ 1 for a perfectly ranked prediction). Needs ≥ 2 items per
    step."""

    paper = PAPER
    provenance = "CODE"
    requires = frozenset({"predicted_score", "true_score"})
    max_value = 1.0 + 2 * RANK_EPS**0.5

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        o, s = _inputs(batch, "rapo_rank")
        return rank_reward(o, s, batch.group)

    def present(self, batch: RolloutBatch) -> Tensor:
        """The rows with a parseable prediction."""
        return batch.input("predicted_score").isfinite()
