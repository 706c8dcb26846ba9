"""Reward shaping: extra reward components computed from the rollouts (registered in ``SHAPING``)."""
from polo.core.shaping.base import RewardShaping

__all__ = ["RewardShaping"]
