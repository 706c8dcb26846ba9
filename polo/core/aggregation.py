"""Loss aggregation: token losses ``u[B,T]`` → scalar, normalized by optimizer-step totals.

Every denominator is a total over the whole optimizer step (all micro-batches and ranks), so the sum of
the aggregated micro-batch losses equals the aggregated loss of the full batch, values and gradients.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field
from torch import Tensor

from polo.core.registry import AGGREGATIONS, Component
from polo.core.segment import masked_mean, masked_sum


@dataclass(frozen=True)
class StepCounts:
    """Totals over the whole optimizer step."""

    tokens: float  # Σ mask
    sequences: float  # B': rows with ≥ 1 valid token
    samples: float  # B
    max_length: int  # default L_norm (max response length)

    @classmethod
    def from_mask(cls, mask: Tensor, max_length: int) -> "StepCounts":
        return cls(
            tokens=float(mask.sum()),
            sequences=float((mask.sum(-1) > 0).sum()),
            samples=float(mask.shape[0]),
            max_length=max_length,
        )


def _nonzero(d: float) -> float:
    """A denominator that is 0 only when its numerator is: everything masked → loss 0 (with grad)."""
    return d if d > 0 else 1.0


class Aggregation(Component):
    """``Σ m·u / denominator(counts)``; subclasses choose the denominator."""

    def __call__(self, token_loss: Tensor, mask: Tensor, counts: StepCounts) -> Tensor:
        return masked_sum(token_loss, mask) / _nonzero(self.denominator(counts))

    def denominator(self, counts: StepCounts) -> float:
        raise NotImplementedError


@AGGREGATIONS.register("token_mean")
class TokenMean(Aggregation):
    """Σ m·u / Σ m (global valid-token count): every token weighs the same, so long responses are not
    down-weighted (DAPO's token-level policy-gradient loss)."""

    paper = "DAPO: An Open-Source LLM Reinforcement Learning System at Scale (arXiv:2503.14476)"

    def denominator(self, counts: StepCounts) -> float:
        return counts.tokens


@AGGREGATIONS.register("seq_mean_token_sum")
class SeqMeanTokenSum(Aggregation):
    """(1/B') Σ_i Σ_t m·u: the whole response is one action whose log-prob is the sum of its tokens' (the
    sequence-level REINFORCE view of RLOO)."""

    paper = ("Back to Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs "
             "(arXiv:2402.14740)")

    def denominator(self, counts: StepCounts) -> float:
        return counts.sequences


@AGGREGATIONS.register("seq_mean_token_sum_norm")
class SeqMeanTokenSumNorm(Aggregation):
    """Σ m·u / (B·L_norm), L_norm = ``max_length`` or ``counts.max_length``: a constant denominator, so
    neither the response length nor the number of valid tokens biases the gradient (Dr.GRPO)."""

    paper = "Understanding R1-Zero-Like Training: A Critical Perspective (arXiv:2503.20783)"

    max_length: int | None = Field(default=None, gt=0)

    def denominator(self, counts: StepCounts) -> float:
        return counts.samples * (self.max_length or counts.max_length)


@AGGREGATIONS.register("seq_mean_token_mean")
class SeqMeanTokenMean(Aggregation):
    """(1/B') Σ_i (Σ_t m·u / Σ_t m); rows without valid tokens contribute 0 (GRPO's per-response mean).
    """

    paper = ("DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models "
             "(arXiv:2402.03300)")

    def __call__(self, token_loss: Tensor, mask: Tensor, counts: StepCounts) -> Tensor:
        return masked_mean(token_loss, mask, dim=-1).sum() / _nonzero(counts.sequences)
