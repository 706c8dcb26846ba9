"""The KL coefficients of a run (trainer state, checkpointed) and the adaptive controller that moves them.

Adaptive KL controller (Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
arXiv:1909.08593): with a target, the coefficient in use (the loss term's, or the advantage's KL-in-reward
penalty when the loss term is off) follows ``β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·B/horizon)`` after
every step, B = samples per step, KL = the observed KL to the reference.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KlCoefficients:
    loss: float
    """Coefficient of the KL loss term (``kl.coef``)."""
    reward: float
    """Coefficient of the advantage's KL-in-reward penalty (its ``kl_coef``; 0 when it has none)."""
    target: float | None = None
    horizon: int = 10000
    batch_size: int = 1

    @property
    def in_reward(self) -> bool:
        return self.loss == 0 and self.reward > 0

    def adapt(self, row: dict) -> dict[str, float]:
        """One controller step from the step's metrics; returns ``kl/coef`` when it moved a coefficient."""
        observed = row.get("kl/behaviour_ref" if self.in_reward else "policy/kl_ref")
        if self.target is None or observed is None:
            return {}
        error = max(-0.2, min(0.2, observed / self.target - 1))
        factor = 1 + error * self.batch_size / self.horizon
        if self.in_reward:
            self.reward *= factor
            return {"kl/coef": self.reward}
        self.loss *= factor
        return {"kl/coef": self.loss}

    def state_dict(self) -> dict[str, float]:
        return {"loss": self.loss, "reward": self.reward}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.loss, self.reward = state["loss"], state["reward"]
