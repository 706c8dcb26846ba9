"""Information consistency across paraphrases: entropy helpfulness and entropy stability within each group."""
from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.registry import SHAPING
from polo.core.shaping.base import RewardShaping

EPS = 1e-8


def helpfulness_stability(entropy: Tensor, group: Tensor) -> tuple[Tensor, Tensor]:
    """``(H̃, F)``, each ``[B]``, from the responses' entropies ``H`` ``[B]`` and their groups ``[B]``.

    Within each group of K responses (one per paraphrase of a question), with ``MAX_GAP = max_j H_j − min_j H_j``:
    helpfulness ``H̃_k = (H_k − min_j H_j) / (MAX_GAP + 1e-8)`` (min–max normalised entropy), stability
    ``F_k = 1 − (1/(K−1))·Σ_{j≠k} |H_k − H_j| / (MAX_GAP + 1e-8)`` (1 when a response carries as much information
    as the others). A group whose entropies are all equal, and a group of one, give ``H̃ = 0``, ``F = 1``.
    Vectorized over the batch with a ``[B, B]`` same-group mask. Non-finite entropies are refused.
    """
    if not bool(torch.isfinite(entropy).all()):
        raise ValueError("info_consistency: the response entropies must be finite, got "
                         f"{entropy[~torch.isfinite(entropy)].tolist()}")
    _, inv = torch.unique(group, return_inverse=True)
    n = int(inv.max()) + 1 if len(inv) else 0
    high = entropy.new_full((n,), -torch.inf).scatter_reduce(0, inv, entropy, "amax")[inv]
    low = entropy.new_full((n,), torch.inf).scatter_reduce(0, inv, entropy, "amin")[inv]
    spread = high - low + EPS
    same = inv[:, None] == inv[None, :]
    gaps = ((entropy[:, None] - entropy[None, :]).abs() * same).sum(1)
    others = (same.sum(1) - 1).clamp_min(1)
    return (entropy - low) / spread, 1 - gaps / others / spread


@SHAPING.register("info_consistency")
class InfoConsistency(RewardShaping):
    """``r_k = α·H̃_k + β·F_k`` (``helpfulness_stability``) of each response's word entropy ``H_k``
    (the ``word_entropy`` input: the Shannon entropy, natural log, of its lower-cased whitespace words), computed
    within the batch's groups. With the ``paraphrase_group`` prompt sampler a group is one response to each of K
    rewordings of one question, so ``F`` rewards answers that carry the same amount of information whatever
    the wording, and ``H̃`` the more informative answers of the group. The group advantage (GRPO) then turns the
    scalar reward (this term plus the task's rewards, with their weights) into advantages.

    Alone, ``H̃`` rewards longer answers of more distinct words; pair it with the task's ``correct`` reward
    (recipe ``info_consistent_grpo``). ``max_value = α + β`` (both parts lie in [0, 1]).

    Paper: Information-Consistent Language Model Recommendations through Group Relative Policy Optimization
    (arXiv:2512.12858); the formulas from its abstract and a reading note, the word-unigram unit reconstructed.
    """

    paper = "Information-Consistent Language Model Recommendations through Group Relative Policy Optimization " \
            "(arXiv:2512.12858)"
    provenance = "RECONSTRUCTED"
    requires = frozenset({"word_entropy"})

    alpha: float = Field(0.5, ge=0.0)
    """α: weight of helpfulness H̃."""
    beta: float = Field(0.5, ge=0.0)
    """β: weight of stability F."""

    @property
    def max_value(self) -> float:  # type: ignore[override]
        return self.alpha + self.beta

    def __call__(self, batch: RolloutBatch, max_new_tokens: int) -> Tensor:
        entropy = batch.input("word_entropy")
        if entropy is None or entropy.shape != (batch.batch_size,):
            raise ValueError(f"shaping info_consistency: input 'word_entropy' must have shape [B] = "
                             f"[{batch.batch_size}], got {None if entropy is None else list(entropy.shape)}")
        helpful, stable = helpfulness_stability(entropy.double(), batch.group)
        return (self.alpha * helpful + self.beta * stable).float()
