"""Reward shaping: extra reward components computed from the rollouts (registered in ``SHAPING``)."""
from polo.core.shaping.base import RewardShaping
from polo.core.shaping import overlong  # noqa: F401  (registers)
from polo.core.shaping import info_consistency  # noqa: F401  (registers)

__all__ = ["RewardShaping"]
