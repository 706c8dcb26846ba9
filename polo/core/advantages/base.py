"""Advantage estimators: a rollout batch → token advantages ``[B,T]``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import PrivateAttr, field_validator
from torch import Tensor

from polo.core.batch import RolloutBatch
from polo.core.divergences import DIVERGENCES
from polo.core.registry import Component


@dataclass
class AdvantageResult:
    advantages: Tensor  # [B,T], zero where response_mask == 0
    returns: Tensor | None = None  # [B,T] critic targets (GAE) or None
    keep: Tensor | None = None  # [B] bool: rows that enter the loss (None: all), e.g. MC-GRPO drops its pivot
    diagnostics: dict[str, float] = field(default_factory=dict)  # logged by the trainer as given, e.g. "gigpo/..."


class AdvantageEstimator(Component):
    """Batch → ``AdvantageResult``; advantages are zero where ``response_mask == 0``."""

    kl_in_reward: ClassVar[bool] = False
    """True for estimators with a KL-in-reward penalty whose coefficient the trainer adapts."""

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
    every valid token (the KL-in-reward penalty of RLHF with PPO, as in "Fine-Tuning Language Models from
    Human Preferences", arXiv:1909.08593)."""

    kl_in_reward: ClassVar[bool] = True
    """The trainer passes the current (adaptive) coefficient as ``__call__(batch, kl_coef=...)``; ``kl_coef``
    is its initial value."""

    kl_coef: float = 0.0
    kl_estimator: str = "k1"
    gamma: float = 1.0

    _divergence = PrivateAttr(default=None)

    @field_validator("kl_estimator")
    @classmethod
    def _known_divergence(cls, name: str) -> str:
        DIVERGENCES.get(name)
        return name

    def model_post_init(self, context) -> None:
        self._divergence = DIVERGENCES.build(self.kl_estimator)

    def __call__(self, batch: RolloutBatch, kl_coef: float | None = None) -> AdvantageResult:
        raise NotImplementedError

    def needs(self) -> set[str]:
        return set(self.requires) | ({"old_logp", "ref_logp"} if self.kl_coef > 0 else set())

    def token_rewards(self, batch: RolloutBatch, reward: Tensor, kl_coef: float | None = None) -> Tensor:
        """``R_i`` on the last valid token minus ``β·kl`` on every valid token, β = ``kl_coef`` if given (the
        trainer's adaptive coefficient) else the configured one."""
        mask = batch.mask
        last = mask * (mask.cumsum(-1) == mask.sum(-1, keepdim=True))
        tok_r = reward[:, None] * last
        beta = self.kl_coef if kl_coef is None else kl_coef
        if beta > 0:
            tok_r = tok_r - beta * self._divergence(batch.old_logp, batch.ref_logp) * mask
        return tok_r
