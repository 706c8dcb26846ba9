"""Advantage estimators: a rollout batch → token advantages ``[B,T]`` (spec §0.1)."""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import field_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.divergences import DIVERGENCES
from polo.core.registry import Component


@dataclass
class AdvantageResult:
    advantages: Tensor  # [B,T], zero where response_mask == 0
    returns: Tensor | None = None  # [B,T] critic targets (GAE) or None
    keep: Tensor | None = None  # [B] bool: rows that enter the loss (None: all), e.g. MC-GRPO drops its pivot


class AdvantageEstimator(Component):
    """Batch → ``AdvantageResult``; advantages are zero where ``response_mask == 0``."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        raise NotImplementedError


class SequenceAdvantage(AdvantageEstimator):
    """One scalar A_i per sample from the scalar reward and the groups, broadcast: ``adv = A[:,None]·mask``."""

    def __call__(self, batch: RolloutBatch) -> AdvantageResult:
        mask = batch.mask
        adv = self.sequence_advantage(batch.scalar_reward().to(mask), batch.group)
        return AdvantageResult(adv[:, None] * mask)

    def sequence_advantage(self, reward: Tensor, group: Tensor) -> Tensor:
        raise NotImplementedError


class TokenRewardAdvantage(AdvantageEstimator):
    """Estimators on token rewards: R_i on the last valid token, minus ``kl_coef·kl(old_logp, ref_logp)`` on
    every valid token (KL-in-reward, spec §1 and §8)."""

    kl_coef: float = 0.0
    kl_estimator: str = "k1"
    gamma: float = 1.0

    @field_validator("kl_estimator")
    @classmethod
    def _known_divergence(cls, name: str) -> str:
        DIVERGENCES.get(name)
        return name

    def needs(self) -> set[str]:
        return set(self.requires) | ({"old_logp", "ref_logp"} if self.kl_coef > 0 else set())

    def token_rewards(self, batch: RolloutBatch, reward: Tensor) -> Tensor:
        mask = batch.mask
        last = mask * (mask.cumsum(-1) == mask.sum(-1, keepdim=True))
        tok_r = reward[:, None] * last
        if self.kl_coef > 0:
            kl = DIVERGENCES.get(self.kl_estimator)()(batch.old_logp, batch.ref_logp)
            tok_r = tok_r - self.kl_coef * kl * mask
        return tok_r
