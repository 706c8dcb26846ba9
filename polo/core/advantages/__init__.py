"""Advantage estimators (registered in ``ADVANTAGES``)."""
from polo.core.advantages.base import AdvantageEstimator, AdvantageResult, SequenceAdvantage, TokenRewardAdvantage
from polo.core.advantages.gae import GAE, gae
from polo.core.advantages.group import GRPO, RLOO, DrGRPO
from polo.core.advantages.reinforce_pp import ReinforcePP, ReinforcePPBaseline

__all__ = [
    "GAE", "GRPO", "RLOO", "AdvantageEstimator", "AdvantageResult", "DrGRPO", "ReinforcePP",
    "ReinforcePPBaseline", "SequenceAdvantage", "TokenRewardAdvantage", "gae",
]
